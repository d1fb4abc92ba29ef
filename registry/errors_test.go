package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/muster-io/muster/registry"
)

// TestRetryable: the three errors worth a retry are, wrapped or not; the
// others are not.
func TestRetryable(t *testing.T) {
	for _, err := range []error{registry.ErrNotReady, registry.ErrUnavailable, registry.ErrNoLeader, fmt.Errorf("%w: forwarding to n2: %w", registry.ErrUnavailable, registry.ErrNotMember)} {
		if !registry.Retryable(err) {
			t.Errorf("Retryable(%v) = false", err)
		}
	}
	for _, err := range []error{nil, registry.ErrClosed, registry.ErrLimit, registry.ErrNotFound, registry.ErrSessionClosed, registry.ErrKindMismatch, context.Canceled, errors.New("x")} {
		if registry.Retryable(err) {
			t.Errorf("Retryable(%v) = true", err)
		}
	}
}
