package raftcp_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/raftcp"
	"github.com/muster-io/muster/transport"
)

type nopFeed struct{}

func (nopFeed) Applied([]model.Command)   {}
func (nopFeed) Reset(registry.StoreState) {}

type nopListener struct{}

func (nopListener) Applied([]raftstore.Change) {}
func (nopListener) Reset(raftstore.State)      {}

// The fields the registry owns are refused when set; a Store opens once.
func TestOpenRefusesOwnedFields(t *testing.T) {
	tr, err := (&transport.MemNetwork{}).Node("solo")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	valid := func() raftstore.Config {
		rc := raftstore.DefaultConfig()
		rc.ReplicaID, rc.DeploymentID, rc.Dir, rc.Transport = 1, 1, t.TempDir(), tr
		rc.InitialMembers = map[uint64]string{1: "solo"}
		return rc
	}
	env := registry.Env{NodeID: "solo", Logger: slog.New(slog.DiscardHandler)}
	for name, mod := range map[string]func(*raftstore.Config){
		"Listener must be nil": func(c *raftstore.Config) { c.Listener = nopListener{} },
		"Limits must be unset": func(c *raftstore.Config) { c.Limits = model.Limits{MaxMetadataSize: 10} },
	} {
		rc := valid()
		mod(&rc)
		if _, err := raftcp.New(rc).Open(env, nopFeed{}); !errors.Is(err, registry.ErrInvalidConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Open: %v", name, err)
		}
	}
	cp := raftcp.New(valid())
	if cp.Node() != nil {
		t.Fatal("a node before Open")
	}
	s, err := cp.Open(env, nopFeed{})
	if err != nil {
		t.Fatal(err)
	}
	if cp.Node() == nil {
		t.Fatal("no node after Open")
	}
	if _, err := cp.Open(env, nopFeed{}); err == nil {
		t.Fatal("a second Open succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// The state machine's rejections match the registry's rule errors as they
// are: both are model's, so Propose passes them on unmapped.
func TestRejectionsMatchRegistryErrors(t *testing.T) {
	for _, tc := range []struct{ rejected, want error }{
		{raftstore.ErrServiceExists, registry.ErrServiceExists},
		{raftstore.ErrServiceNotFound, registry.ErrNotFound},
		{raftstore.ErrInstanceNotFound, registry.ErrNotFound},
		{raftstore.ErrServiceNotEmpty, registry.ErrServiceNotEmpty},
		{raftstore.ErrKindMismatch, registry.ErrKindMismatch},
	} {
		if err := fmt.Errorf("%w: x", tc.rejected); !errors.Is(err, tc.want) {
			t.Errorf("%v does not match %v", err, tc.want)
		}
	}
}
