package distro

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/muster-io/muster/model"
)

// The counters move as the protocol acts: syncs out and in, applied records, verify rounds
// that find and repair a divergence, and each refusal reason.
func TestStatsMove(t *testing.T) {
	c := newCluster(t, nil, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	for i := range 3 {
		if _, err := a.r.Put(KindSession, fmt.Sprint("s", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(time.Second, "b holds a's records", func() bool { return len(held(b.r)) == 3 })
	c.eventually(time.Second, "a counted the acknowledged syncs", func() bool { return a.r.Stats().SyncRecordsSent >= 3 })
	sa, sb := a.r.Stats(), b.r.Stats()
	if !sa.Ready || sa.Members != 2 || sa.OwnedRecords != 3 || sa.Records != 3 || sa.LiveRecords != 3 || sa.SyncsSent == 0 {
		t.Errorf("a: %+v", sa)
	}
	if !sb.Ready || sb.OwnedRecords != 0 || sb.Records != 3 || sb.SyncsReceived == 0 || sb.RecordsApplied != 3 || sb.RecordsReceived != 3 || sb.RefusedStale != 0 {
		t.Errorf("b: %+v", sb)
	}

	// A ghost only b holds, in a's name: a's next verify finds its bucket and has b drop it.
	plant(b, Record{Key: "ghost", Kind: KindSession, Owner: "a", Revision: 4, Payload: []byte("old")})
	c.eventually(3*time.Second, "ghost dropped", func() bool { _, ok := b.r.Get("ghost"); return !ok })
	c.eventually(time.Second, "repair counted", func() bool { return b.r.Stats().RepairsReceived > 0 })
	sa, sb = a.r.Stats(), b.r.Stats()
	if sa.VerifyRounds == 0 || sa.DivergentBuckets == 0 || sa.RepairDrops == 0 || sb.VerifyAnswered == 0 {
		t.Errorf("after the repair: a %+v, b %+v", sa, sb)
	}

	// A partition makes syncs fail (and retry); after the heal they go through.
	c.net.Partition("a", "b")
	if _, err := a.r.Put(KindSession, "late", []byte("x")); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Second, "a sync failed", func() bool { return a.r.Stats().SyncFailures > 0 })
	if p := a.r.Stats().PendingSyncs; p == 0 {
		t.Error("no sync pending during the partition")
	}
	c.net.Heal()
	c.eventually(3*time.Second, "converged after the heal", c.converged)
	c.eventually(time.Second, "nothing pending", func() bool { return a.r.Stats().PendingSyncs == 0 })
	c.checkInvariants() // before the refusals below, which it would count as violations

	// Refusals, by reason, through the handler (the transport authenticated "from").
	ctx := context.Background()
	rec, _ := a.r.Get("s0")
	dup, _ := model.Marshal(syncMsg{Records: wires([]Record{rec})})
	foreign, _ := model.Marshal(syncMsg{Records: wires([]Record{{Key: "f", Kind: KindSession, Owner: "z", Revision: 1}})})
	before := b.r.Stats()
	if _, err := b.r.handleSync(ctx, "a", dup); err != nil {
		t.Fatal(err)
	}
	if _, err := b.r.handleSync(ctx, "a", foreign); err != nil {
		t.Fatal(err)
	}
	if _, err := b.r.handleSync(ctx, "mallory", dup); err == nil {
		t.Fatal("a non-member's sync was accepted")
	}
	if _, err := b.r.handleSync(ctx, "a", []byte{0xc1}); err == nil {
		t.Fatal("a malformed sync was accepted")
	}
	sb = b.r.Stats()
	if sb.RefusedStale != before.RefusedStale+1 || sb.RefusedNotOwner != before.RefusedNotOwner+1 ||
		sb.RefusedNotMember != before.RefusedNotMember+1 || sb.Malformed != before.Malformed+1 {
		t.Errorf("refusals: before %+v, after %+v", before, sb)
	}
}
