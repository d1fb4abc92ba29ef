package testutil

import (
	"math"
	"reflect"
	"testing"
)

func TestEqual(t *testing.T) {
	type inner struct {
		W *float64
		M map[string]float64
	}
	type outer struct {
		F  float64
		S  []inner
		Is []int
		x  string
	}
	nan, one, zero, negZero := math.NaN(), 1.0, 0.0, math.Copysign(0, -1)
	mk := func(f float64, w *float64, m float64, x string) outer {
		return outer{F: f, S: []inner{{W: w, M: map[string]float64{"k": m}}}, x: x}
	}
	cases := []struct {
		a, b outer
		want bool
	}{
		{mk(1, &one, 2, "a"), mk(1, &one, 2, "a"), true},
		{mk(nan, &nan, nan, "a"), mk(nan, &nan, nan, "a"), true},
		{mk(nan, &one, 2, "a"), mk(1, &one, 2, "a"), false},
		{mk(1, &nan, 2, "a"), mk(1, &one, 2, "a"), false},
		{mk(1, &one, nan, "a"), mk(1, &one, 2, "a"), false},
		{mk(1, nil, 2, "a"), mk(1, &one, 2, "a"), false},
		{mk(1, &one, 2, "a"), mk(1, &one, 2, "b"), false}, // unexported fields count
		{mk(zero, &one, 2, "a"), mk(negZero, &one, 2, "a"), false},
		{outer{Is: []int{}}, outer{}, false}, // nil and empty differ, as in DeepEqual
	}
	for i, c := range cases {
		if got := Equal(c.a, c.b); got != c.want {
			t.Errorf("case %d: Equal = %v, want %v", i, got, c.want)
		}
		if c.want && !Equal(c.b, c.a) {
			t.Errorf("case %d: not symmetric", i)
		}
	}
	// Where no float is NaN or a signed zero, it agrees with reflect.DeepEqual.
	for _, i := range []int{0, 5, 6, 8} {
		if c := cases[i]; Equal(c.a, c.b) != reflect.DeepEqual(c.a, c.b) {
			t.Errorf("case %d disagrees with reflect.DeepEqual", i)
		}
	}
	if Equal(1, int64(1)) || !Equal(nil, nil) || Equal(nil, 0) {
		t.Error("types or nils compared wrongly")
	}
}
