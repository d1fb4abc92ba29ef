package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLoaderCurrent: a gRPC client's connection is listed with the labels
// of its session (its own, its IP and SDK version) and its instance count.
func TestLoaderCurrent(t *testing.T) {
	s := startServer(t, nil)
	a := newClient(t, s.HTTPAddr())
	register(t, a, "orders", "", "10.0.0.1", 8080, 1)

	type entry struct {
		MetaInfo struct {
			ConnectionID string            `json:"connectionId"`
			ClientIP     string            `json:"clientIp"`
			Version      string            `json:"version"`
			Labels       map[string]string `json:"labels"`
			CreateTime   int64             `json:"createTime"`
		} `json:"metaInfo"`
		SessionID     string `json:"sessionId"`
		InstanceCount int    `json:"instanceCount"`
	}
	get := func() map[string]entry {
		t.Helper()
		resp, err := http.Get("http://" + s.HTTPAddr() + "/nacos/v1/core/loader/current")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]entry
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("loader/current: %d, %v", resp.StatusCode, err)
		}
		return out
	}
	conns := get()
	if len(conns) != 1 {
		t.Fatalf("loader/current lists %d connections: %+v", len(conns), conns)
	}
	for id, e := range conns {
		m := e.MetaInfo
		if m.ConnectionID != id || m.ClientIP == "" || m.Labels["clientIp"] != m.ClientIP ||
			!strings.HasPrefix(m.Version, "Nacos-Go-Client") || m.Labels["clientVersion"] != m.Version ||
			m.Labels["module"] != "naming" || e.InstanceCount != 1 || e.SessionID == "" {
			t.Fatalf("connection %s listed as %+v", id, e)
		}
		if age := time.Since(time.UnixMilli(m.CreateTime)); age < 0 || age > time.Minute {
			t.Fatalf("createTime %d is %v ago", m.CreateTime, age)
		}
	}
	a.CloseClient()
	eventually(t, 5*time.Second, "a closed client's connection leaves the list", func() bool { return len(get()) == 0 })
}
