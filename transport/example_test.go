package transport_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/muster-io/muster/transport"
)

// A MemNetwork connects in-memory nodes; faults are injected per link.
func ExampleMemNetwork() {
	var network transport.MemNetwork // the zero value is ready
	a, _ := network.Node("a")
	b, _ := network.Node("b")
	defer a.Close()
	defer b.Close()

	const upper transport.Kind = 128
	b.Handle(upper, func(ctx context.Context, from string, body []byte) ([]byte, error) {
		return []byte(strings.ToUpper(string(body))), nil
	})

	ctx := context.Background()
	resp, err := a.Request(ctx, "b", upper, []byte("hello"))
	fmt.Println(string(resp), err)

	network.Partition("a", "b")
	_, err = a.Request(ctx, "b", upper, []byte("hello"))
	fmt.Println(errors.Is(err, transport.ErrUnreachable))

	network.Heal()
	resp, _ = a.Request(ctx, "b", upper, []byte("again"))
	fmt.Println(string(resp), network.Stats("a", "b").Messages)
	// Output:
	// HELLO <nil>
	// true
	// AGAIN 2
}

// In manual-delivery mode the test decides what arrives and in which order.
func ExampleMemNetwork_SetManual() {
	var network transport.MemNetwork
	a, _ := network.Node("a")
	b, _ := network.Node("b")
	defer a.Close()
	defer b.Close()

	got := make(chan string, 2)
	b.Handle(1, func(ctx context.Context, from string, body []byte) ([]byte, error) {
		got <- string(body)
		return nil, nil
	})

	network.SetManual(true)
	ctx := context.Background()
	_ = a.Send(ctx, "b", 1, []byte("first"))
	_ = a.Send(ctx, "b", 1, []byte("second"))
	pending := network.Pending()
	fmt.Println(len(pending), pending[0].From, "->", pending[0].To)

	_ = network.Deliver(pending[1].ID) // reorder
	fmt.Println(<-got)
	_ = network.Drop(pending[0].ID)
	fmt.Println(len(network.Pending()))
	// Output:
	// 2 a -> b
	// second
	// 0
}

// Two TCP nodes on loopback, sharing a secret.
func ExampleNewTCP() {
	addrs := map[string]string{}
	start := func(id string) *transport.TCP {
		cfg := transport.DefaultTCPConfig() // listens on 127.0.0.1, any port
		cfg.NodeID = id
		cfg.Secret = []byte("a secret every node shares, >=16 bytes")
		cfg.Resolve = func(node string) (string, error) { return addrs[node], nil }
		t, err := transport.NewTCP(cfg)
		if err != nil {
			panic(err)
		}
		if err := t.Start(context.Background()); err != nil {
			panic(err)
		}
		addrs[id] = t.Addr()
		return t
	}
	a, b := start("a"), start("b")
	defer a.Close()
	defer b.Close()

	b.Handle(1, func(ctx context.Context, from string, body []byte) ([]byte, error) {
		return []byte("hi " + from), nil
	})
	resp, err := a.Request(context.Background(), "b", 1, nil)
	fmt.Println(string(resp), err)
	// Output: hi a <nil>
}

// An ordered kind's one-way messages from a peer are handled one at a
// time, in the order they were sent: a stream of log entries, for example.
func ExampleOrderedHandler() {
	var network transport.MemNetwork
	a, _ := network.Node("a")
	b, _ := network.Node("b")
	defer a.Close()
	defer b.Close()

	const entries transport.Kind = 129
	var tr transport.Transport = b
	log := make(chan string, 5)
	handle := func(ctx context.Context, from string, body []byte) ([]byte, error) {
		log <- string(body) // no lock needed: one message at a time per peer
		return nil, nil
	}
	if o, ok := tr.(transport.OrderedHandler); ok {
		o.HandleOrdered(entries, handle)
	} else {
		tr.Handle(entries, handle) // a transport without ordering
	}

	ctx := context.Background()
	for _, e := range []string{"e1", "e2", "e3", "e4", "e5"} {
		_ = a.Send(ctx, "b", entries, []byte(e))
	}
	for range 5 {
		fmt.Print(<-log, " ")
	}
	fmt.Println()
	// Output:
	// e1 e2 e3 e4 e5
}
