package registry

import (
	"testing"
	"time"

	"github.com/muster-io/muster/model"
)

func TestJournal(t *testing.T) {
	svc := model.ServiceKey{Namespace: "public", Group: "DEFAULT_GROUP", Name: "s"}
	a := model.InstanceKey{Service: svc, Cluster: "DEFAULT", IP: "10.0.0.1", Port: 80}
	b := model.InstanceKey{Service: svc, Cluster: "DEFAULT", IP: "10.0.0.2", Port: 80}
	t0 := time.Unix(1000, 0)

	var zero journal
	zero.add(Event{Key: a, Kind: EventRegistered})
	if got := zero.find(a, 0); got != nil {
		t.Fatalf("the zero journal recorded %v", got)
	}

	j := newJournal(4)
	j.add(Event{At: t0, Key: a, Kind: EventRegistered, Publisher: "p1", Node: "n1"})
	j.add(Event{At: t0.Add(time.Second), Key: b, Kind: EventRegistered})
	j.add(Event{At: t0.Add(2 * time.Second), Key: a, Kind: EventUnhealthy, Reason: "beat missed"})
	got := j.find(a, 0)
	if len(got) != 2 || got[0].Kind != EventRegistered || got[1].Kind != EventUnhealthy || got[0].Seq != 1 || got[1].Seq != 3 {
		t.Fatalf("find(a) = %v", got)
	}
	if got := j.find(a, 1); len(got) != 1 || got[0].Kind != EventUnhealthy {
		t.Fatalf("find(a, 1) = %v, want the newest only", got)
	}
	// The ring turns over: a's first event goes, the rest stay in order.
	j.add(Event{Key: b, Kind: EventUpdated})
	j.add(Event{Key: a, Kind: EventRemoved, Reason: "lease expired"})
	got = j.find(a, 0)
	if len(got) != 2 || got[0].Seq != 3 || got[1].Seq != 5 || got[1].Reason != "lease expired" {
		t.Fatalf("after the turn, find(a) = %v", got)
	}
	if got := j.find(model.InstanceKey{Service: svc, IP: "10.9.9.9", Port: 1}, 0); len(got) != 0 {
		t.Fatalf("an unknown key has %v", got)
	}
	want := "00:16:40.000 " + a.String() + " registered by p1 on n1"
	if s := (Event{At: t0, Key: a, Kind: EventRegistered, Publisher: "p1", Node: "n1"}).String(); s != want {
		t.Fatalf("String() = %q, want %q", s, want)
	}
	if s := EventKind(99).String(); s != "EventKind(99)" {
		t.Fatalf("an unknown kind formats as %q", s)
	}
}

func BenchmarkJournalAdd(b *testing.B) {
	svc := model.ServiceKey{Namespace: "public", Group: "DEFAULT_GROUP", Name: "s"}
	key := model.InstanceKey{Service: svc, Cluster: "DEFAULT", IP: "10.0.0.1", Port: 80}
	j := newJournal(16384)
	at := time.Unix(1000, 0)
	b.ReportAllocs()
	for b.Loop() {
		j.add(Event{At: at, Key: key, Kind: EventUpdated, Publisher: "p", Node: "n1"})
	}
}
