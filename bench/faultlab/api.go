package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// The driver talks to each node process over HTTP on a Unix socket in the
// run directory: a file-system path, reachable whatever the network
// namespaces do, so that a network fault cuts the nodes from each other and
// never the lab from a node. The clients are embedded in the node process,
// as an application embeds the library: a session lives in the process that
// opened it and dies with it. SIGSTOP stalls the API too (calls time out:
// their outcome is unknown), SIGKILL breaks it.

// instReq names an instance and, for a write, its value (metadata "v") or
// its session.
type instReq struct {
	Service string `json:"service"`
	IP      string `json:"ip"`
	Port    int    `json:"port"`
	Val     string `json:"val,omitempty"`
	Session string `json:"session,omitempty"`
}

type queryReq struct {
	Service      string `json:"service"`
	Linearizable bool   `json:"linearizable,omitempty"`
}

// inst is one instance of a query's answer.
type inst struct {
	IP   string `json:"ip"`
	Port int    `json:"port"`
	Val  string `json:"val,omitempty"`
}

type queryResp struct {
	Incarnation string `json:"inc"`
	Instances   []inst `json:"instances"`
}

// sessionResp answers a session's opening, and a power loss (the
// incarnation that died).
type sessionResp struct {
	ID          string `json:"id,omitempty"`
	Incarnation string `json:"inc"`
}

type readyResp struct {
	Ready     bool   `json:"ready"`
	HasLeader bool   `json:"hasLeader"`
	Applied   uint64 `json:"applied"`
	Term      uint64 `json:"term"`
	Leader    uint64 `json:"leader"`
	// Incarnation is "pid/epoch": the node process and its in-process
	// restarts (power losses) so far. Sessions die with their incarnation.
	Incarnation string `json:"inc"`
	LastIndex   uint64 `json:"lastIndex"`
	// LastPowerLoss describes the last power loss, once the node restarted.
	LastPowerLoss *powerLossInfo `json:"lastPowerLoss,omitempty"`
}

// powerLossInfo is what a power loss dropped: the replica's state before
// it (leader or not, its applied and last log index, the commit-index
// writes its LogDB wrapper had held back so far), and the bytes of the Raft
// log's file system before and after the unsynced writes were dropped.
type powerLossInfo struct {
	Mode        string `json:"mode"` // "fsync": at a WAL sync, after Skip others; "instant"
	Skip        int64  `json:"skip"`
	WasLeader   bool   `json:"wasLeader"`
	Applied     uint64 `json:"applied"`
	LastIndex   uint64 `json:"lastIndex"`
	Deferred    uint64 `json:"deferred"`
	BytesBefore int64  `json:"bytesBefore"`
	BytesAfter  int64  `json:"bytesAfter"`
}

type event struct {
	Kind      string `json:"kind"`
	Reason    string `json:"reason,omitempty"`
	Node      string `json:"node,omitempty"`
	Publisher string `json:"publisher,omitempty"`
}

type explainResp struct {
	Present bool    `json:"present"`
	Events  []event `json:"events"`
}

// apiError is a node's error answer. Kind classifies it: "notfound" (a
// definite answer: no such instance), "invalid", "notready", "down" (the
// node is restarting in-process), or "other" (the outcome is unknown).
type apiError struct {
	Kind string `json:"kind"`
	Err  string `json:"err"`
}

func (e *apiError) Error() string { return e.Kind + ": " + e.Err }

// errUnreachable: the call did not reach the node (connection refused, no
// socket): nothing happened.
var errUnreachable = errors.New("node unreachable")

// errKind classifies a call's error: "" for none, "unreachable" (nothing
// happened), "timeout" and "other" (unknown outcome), or the node's kind.
func errKind(err error) string {
	var ae *apiError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ae):
		return ae.Kind
	case errors.Is(err, errUnreachable):
		return "unreachable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "other"
}

// apiClient calls one node's API.
type apiClient struct {
	http *http.Client
}

func newAPIClient(socket string) *apiClient {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", errUnreachable, err)
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	return &apiClient{http: &http.Client{Transport: tr}}
}

// call posts in as JSON to path and decodes the answer into out (nil
// ignores it), within timeout.
func (c *apiClient) call(ctx context.Context, timeout time.Duration, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://node"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return err
	}
	if resp.StatusCode != http.StatusOK {
		ae := &apiError{}
		if json.Unmarshal(data, ae) != nil || ae.Kind == "" {
			ae = &apiError{Kind: "other", Err: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, data)}
		}
		return ae
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}
