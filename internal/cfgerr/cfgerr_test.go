package cfgerr

import (
	"errors"
	"testing"
)

func TestJoin(t *testing.T) {
	outer := errors.New("registry: invalid config")
	inner := errors.New("health: invalid config")
	rule := errors.New("PatchTTL must be positive (got 0s)")
	nested := Join(inner, errors.New("Interval must be positive"), errors.New("Timeout must be positive"))
	err := Join(outer, errors.New("NodeID must not be empty"), nil, rule, nested)
	want := "registry: invalid config: NodeID must not be empty\n" +
		"registry: invalid config: PatchTTL must be positive (got 0s)\n" +
		"registry: invalid config: health: invalid config: Interval must be positive\n" +
		"registry: invalid config: health: invalid config: Timeout must be positive"
	if err.Error() != want {
		t.Fatalf("message:\n%s\nwant:\n%s", err, want)
	}
	for _, target := range []error{outer, inner, rule} {
		if !errors.Is(err, target) {
			t.Errorf("does not match %v", target)
		}
	}
	if Join(outer) != nil || Join(outer, nil) != nil {
		t.Fatal("no rule error, yet an error")
	}
	// A line that already carries the prefix is not prefixed twice.
	if got := Join(outer, Join(outer, rule)).Error(); got != "registry: invalid config: PatchTTL must be positive (got 0s)" {
		t.Fatalf("prefixed twice: %s", got)
	}
}
