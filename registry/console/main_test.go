package console_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the sampler and
// every event stream's watchers stop with Close and the request.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
