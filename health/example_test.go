package health_test

import (
	"fmt"
	"time"

	"github.com/muster-io/muster/health"
)

// A driver puts a lease when an instance registers, touches it on every beat, and calls Expire
// whenever Next says so. Here the clock jumps straight to each time Next returns; the first one
// (t0+15s) only re-arms the lease, which was touched at t0+5s.
func ExampleLeases() {
	t0 := time.Unix(1_700_000_000, 0)
	var l health.Leases[string]
	err := l.Put("10.0.0.7:8080", t0, health.Timeouts{Unhealthy: 15 * time.Second, Expire: 30 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	l.Touch("10.0.0.7:8080", t0.Add(5*time.Second)) // a beat

	for {
		now, ok := l.Next()
		if !ok {
			break
		}
		l.Expire(now, func(id string, ev health.Event) {
			fmt.Printf("t0+%v %s %v\n", now.Sub(t0), id, ev)
		})
	}
	fmt.Println("leases left:", l.Len())
	// Output:
	// t0+20s 10.0.0.7:8080 unhealthy
	// t0+35s 10.0.0.7:8080 expired
	// leases left: 0
}

func ExampleTimeouts_Validate() {
	err := health.Timeouts{Unhealthy: 30 * time.Second, Expire: 15 * time.Second}.Validate()
	fmt.Println(err)
	// Output:
	// health: invalid timeouts: Unhealthy (30s) must not exceed Expire (15s)
}
