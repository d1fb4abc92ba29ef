package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMemBasic(t *testing.T) {
	defer goleak.VerifyNone(t)
	var n MemNetwork
	a, err := n.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := n.Node("b")
	b.Handle(1, func(ctx context.Context, from string, body []byte) ([]byte, error) {
		return append([]byte(from+":"), body...), nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := a.Request(ctx, "b", 1, []byte("hi"))
	if err != nil || string(got) != "a:hi" {
		t.Fatalf("got %q %v", got, err)
	}
	n.Partition("a", "b")
	if _, err := a.Request(ctx, "b", 1, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("partitioned: %v", err)
	}
	a.Close()
	b.Close()
}
