package raftcp

import (
	"errors"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/raftstore"
	"github.com/muster-io/muster/registry"
)

// keepFeed keeps a copy of every command it gets, as the registry may.
type keepFeed struct{ kept []model.Command }

func (f *keepFeed) Applied(cmds []model.Command) { f.kept = append(f.kept, cmds...) }
func (*keepFeed) Reset(registry.StoreState)      {}

// TestListenerReusesBuffer: the listener hands on the applied commands (not
// the rejected ones) in one buffer reused from call to call, which holds
// nothing of a call after it; what the feed kept is not touched by the
// next call; a long call's buffer is let go.
func TestListenerReusesBuffer(t *testing.T) {
	f := &keepFeed{}
	l := &listener{feed: f}
	put := func(name string) raftstore.Change {
		return raftstore.Change{Cmd: model.Command{Op: model.OpPutInstance, Instance: model.Instance{Service: model.ServiceKey{Name: name}}}}
	}
	refused := put("refused")
	refused.Rejected = errors.New("refused")
	l.Applied([]raftstore.Change{put("a"), refused, put("b")})
	l.Applied([]raftstore.Change{put("c")})
	var names []string
	for _, c := range f.kept {
		names = append(names, c.Instance.Service.Name)
	}
	if len(names) != 3 || names[0] != "a" || names[1] != "b" || names[2] != "c" {
		t.Fatalf("the feed got %q", names)
	}
	if cap(l.cmds) < 2 {
		t.Fatalf("the buffer was not kept (capacity %d)", cap(l.cmds))
	}
	for i, c := range l.cmds[:cap(l.cmds)] {
		if c.Instance.Service.Name != "" {
			t.Fatalf("the buffer keeps %d: %+v", i, c)
		}
	}
	l.Applied(make([]raftstore.Change, maxKeptCmds+1))
	if l.cmds != nil {
		t.Fatalf("a long call's buffer (capacity %d) was kept", cap(l.cmds))
	}
}
