package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestQuick runs the quick mode (what CI runs) and checks that its figures are sane: every
// change was synced to every peer, verify rounds ran, the joiner loaded.
func TestQuick(t *testing.T) {
	var out, log bytes.Buffer
	if err := run([]string{"-quick", "-q"}, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	rows := 0
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "| 3 |") || strings.HasPrefix(l, "| 5 |") {
			rows++
		}
	}
	if rows != 2 {
		t.Fatalf("want 2 rows, got:\n%s", out.String())
	}
}

// TestMeasureSmall checks the measured figures of one small configuration against what the
// protocol implies.
func TestMeasureSmall(t *testing.T) {
	p := params{Nodes: 3, Instances: 3000, Changes: 10, Batch: 5, InFlight: 2, Chunk: 1000}
	r, err := measure(p, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	// A change is one record of about 230 bytes sent to each of the 2 peers.
	if r.ChangePeerBytes < 150 || r.ChangePeerBytes > 1000 {
		t.Errorf("bytes per change per peer %.0f, want 150–1000", r.ChangePeerBytes)
	}
	// An idle verify round is the digest: 8 bytes per bucket, 1024 buckets, and an empty answer.
	if r.VerifyIdle < 8192 || r.VerifyIdle > 8400 {
		t.Errorf("idle verify %.0f B per peer per round, want about 8 KiB", r.VerifyIdle)
	}
	if r.JoinPeers != 3 {
		t.Errorf("the joiner loaded from %d peers, want 3", r.JoinPeers)
	}
	if r.HeapPerRecord <= 0 || r.JoinerHeap <= 0 {
		t.Errorf("heap per record %.0f, joiner heap %.0f", r.HeapPerRecord, r.JoinerHeap)
	}
}
