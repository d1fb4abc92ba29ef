package main

import (
	"sync"
	"sync/atomic"

	"github.com/lni/vfs"
)

// syncTrap springs a power loss at its worst moment: armed, it springs on
// a sync of the Raft log's file system (nearly always its write-ahead log,
// which Dragonboat syncs once per write), after the write and before the
// sync. spring runs inside that Sync, before the sync itself: it cuts the
// node's network (nothing the write would let the replica send, an
// acknowledgement above all, leaves) and freezes the file system: that
// Sync, and every operation on the file system after it, never returns, as
// on a machine whose power is gone. So Dragonboat never learns that the
// write was synced, and applies nothing it carried to the state machine;
// the process then dumps what had been synced and exits (see crash).
//
// It is a vfs.Injector that never injects an error: Dragonboat accepts,
// besides the OS's, only a *vfs.MemFS or a *vfs.ErrorFS (raftstore's
// Config.FS), so the trap wraps the strict in-memory FS as an ErrorFS.
type syncTrap struct {
	countdown atomic.Int64 // syncs to let through before the trap springs; 0: disarmed
	mu        sync.Mutex   // held while spring runs
	spring    func()
	frozen    atomic.Bool // the power is gone: no operation returns
}

// freeze makes every operation from now on block for ever.
func (t *syncTrap) freeze() { t.frozen.Store(true) }

// arm sets the trap to spring on the skip+1-th sync from now.
func (t *syncTrap) arm(skip int64, spring func()) {
	t.mu.Lock()
	t.spring = spring
	t.mu.Unlock()
	t.countdown.Store(skip + 1)
}

func (t *syncTrap) disarm() { t.countdown.Store(0) }

// MaybeError implements vfs.Injector.
func (t *syncTrap) MaybeError(op vfs.Op) error {
	t.halt()
	if op != vfs.OpSync {
		return nil
	}
	for {
		c := t.countdown.Load()
		if c <= 0 {
			return nil
		}
		if t.countdown.CompareAndSwap(c, c-1) {
			if c == 1 {
				t.mu.Lock()
				t.spring()
				t.mu.Unlock()
				t.halt()
			}
			return nil
		}
	}
}

// halt blocks for ever once the file system is frozen: the goroutine is
// stopped where the power loss found it, until the process exits.
func (t *syncTrap) halt() {
	if t.frozen.Load() {
		select {}
	}
}
