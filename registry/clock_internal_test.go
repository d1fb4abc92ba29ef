package registry

import (
	"testing"
	"time"
)

var sinkTime time.Time

// BenchmarkClockNow: what reading the real clock costs on this machine, the
// floor under every heartbeat (each records when it happened).
func BenchmarkClockNow(b *testing.B) {
	r, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		sinkTime = r.now()
	}
}
