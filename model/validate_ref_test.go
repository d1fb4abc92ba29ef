package model

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The rule-by-rule checks as they were before the one-pass fast paths of
// checkMetadata and checkServiceName (issue 30.1): the reference the fuzz
// test below holds the fast paths to, error for error.

func refCheckServiceName(name string) error {
	const field = "service.name"
	switch {
	case name == "":
		return invalid(field, "must not be empty", "")
	case len(name) > MaxServiceNameLen:
		return invalid(field, "must be at most "+strconv.Itoa(MaxServiceNameLen)+" bytes", name)
	case name[0] == '@':
		return invalid(field, "must not start with '@'", name)
	case strings.Contains(name, GroupSeparator):
		return invalid(field, "must not contain \"@@\"", name)
	}
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return invalid(field, "must be printable ASCII without spaces", name)
		}
	}
	if refIsPathLike(name) {
		return invalid(field, `must not be path-like (a backslash, a leading '/', or an empty, "." or ".." segment between slashes)`, name)
	}
	return nil
}

func refIsPathLike(name string) bool {
	if strings.IndexByte(name, '\\') >= 0 || name[0] == '/' {
		return true
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

func refCheckMetadata(field string, m Metadata, l Limits) error {
	if size, max := m.Size(), l.maxMetadata(); size > max {
		return invalidNumber(field, "keys and values must total at most "+strconv.Itoa(max)+" characters", strconv.Itoa(size)+" characters")
	}
	for k, v := range m.All() {
		if k == "" {
			return invalid(field, "keys must not be empty", "")
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return invalid(field+"["+strings.ToValidUTF8(k, "?")+"]", "must be valid UTF-8", "")
		}
		if strings.IndexFunc(k, unicode.IsControl) >= 0 {
			return invalid(field, "keys must not contain control characters (U+0000–U+001F, U+007F–U+009F)", k)
		}
		if strings.IndexFunc(v, isValueControl) >= 0 {
			return invalid(field+"["+k+"]", "must not contain control characters other than tab (U+0000–U+0008, U+000A–U+001F, U+007F–U+009F)", v)
		}
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// FuzzValidateFastPaths: the one-pass checks of service names and metadata
// accept exactly what the rule-by-rule checks accept, and reject the rest
// with the same error (the same rule, field and value).
func FuzzValidateFastPaths(f *testing.F) {
	f.Add("orders", "version", "1.4.2", "zone", "a\tb", 0)
	f.Add("a@@b", "", "v", "k", "v", 8)
	f.Add("/a\\b", "k\x7f", "v\x00", "k2", "\x1b", 0)
	f.Add("a/./b", "k\u0085", "ü", "ключ", "значение", 5)
	f.Add("a//b@", "\xff", "v", "k", "\xc3", 3)
	f.Add("..", "k", "v\u009f", "k2", "v2", 1)
	f.Add("a b/..", "k", strings.Repeat("x", 1030), "k2", "v", 0)
	f.Fuzz(func(t *testing.T, name, k1, v1, k2, v2 string, max int) {
		if got, want := errText(checkServiceName(name)), errText(refCheckServiceName(name)); got != want {
			t.Fatalf("service name %q: got %s, want %s", name, got, want)
		}
		l := Limits{MaxMetadataSize: max % 2048}
		m := NewMetadata(map[string]string{k1: v1, k2: v2})
		if got, want := errText(checkMetadata("instance.metadata", m, l)), errText(refCheckMetadata("instance.metadata", m, l)); got != want {
			t.Fatalf("metadata %v (max %d): got %s, want %s", m, l.MaxMetadataSize, got, want)
		}
	})
}

// FuzzPlainIPv4: the one-pass IPv4 check accepts only what netip.ParseAddr
// parses as an IPv4 address other than 0.0.0.0, and accepts every such
// address in dotted-quad form.
func FuzzPlainIPv4(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5",
		"1..2.3", "1.2.3.4.", ".1.2.3", "0.0.0.1", "1.0.0.0", "::1", "::ffff:1.2.3.4", "1.2.3.-4", "1.2.3.4a", "0000.1.1.1", "1.2.3.04"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got := plainIPv4(host)
		addr, err := netip.ParseAddr(host)
		if want := err == nil && addr.Is4() && !addr.IsUnspecified(); got && !want {
			t.Fatalf("plainIPv4(%q) = true; netip: %v, %v", host, addr, err)
		} else if want && !got && addr.String() == host {
			t.Fatalf("plainIPv4(%q) = false for a valid address", host)
		}
		if got && checkHost("instance.ip", host) != nil {
			t.Fatalf("checkHost rejects %q, which plainIPv4 accepts", host)
		}
	})
}

// refPlainMetadata is plainMetadata as it was before its pass over the
// whole encoding (issue 30, item 1), string by string, with
// hasPrefix's answer for the preserved prefix.
func refPlainMetadata(m Metadata, max int) (plain, preserved bool) {
	size := 0
	for i, off := 0, m.first(); off < len(m.p); i++ {
		var s string
		s, off = strAt(m.p, off)
		if s == "" && i%2 == 0 {
			return false, false
		}
		size += len(s)
		tab := i%2 == 1
		for j := 0; j < len(s); j++ {
			if c := s[j]; c < ' ' || c > '~' {
				if c != '\t' || !tab {
					return false, false
				}
			}
		}
	}
	return size <= max, m.hasPrefix(preservedPrefix)
}

// FuzzPlainMetadata: plainMetadata's one pass answers as the pass string
// by string did, with hasPrefix's answer for the preserved prefix, and an
// instance's metadata gets checkMetadata's and checkBeatTimings' errors in
// their order; outsideText counts as a byte-by-byte loop does.
func FuzzPlainMetadata(f *testing.F) {
	f.Add("version", "1.4.2", "zone", "zone-a", "id", "i-4194304", 0, 1024)
	f.Add("k", "a\tb", "k\t", "v", "", "v", 0, 1024)
	f.Add("preserved.heart.beat.interval", "20000", "preserved.", "x", "preserve", "v", 3, 1024)
	f.Add("preserved.heart.beat.timeout", "x", "p", "\x7f", "q", "\x80", 0, 100)
	f.Add("k\x1f", "v", "k2", "\x20\x7e", "k3", "0123456789abcdef0123456789abcdef", 20, 1024)
	f.Add("ключ", "значение", "k", "ü", "k2", "\xff", 0, 8)
	f.Add("a", "1234567", "b", "12345678", "c", "123456789", 15, 30)
	f.Add("preserved.", "x", "preserved.", "x", "preserved.", "x", 0, 1024) // the prefix alone, one pair
	f.Add("0", "0000", "00", "0", "0", "0000", 0, 8)                        // exactly at the size limit
	f.Add("0", "0000", "00", "0", "0", "0000", 0, 7)                        // one byte over it
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string, extra, max int) {
		pairs := map[string]string{k1: v1, k2: v2, k3: v3}
		for i := range extra % 40 {
			pairs["x"+strconv.Itoa(i)] = strconv.Itoa(i)
		}
		m := NewMetadata(pairs)
		max %= 2048
		plain, preserved := plainMetadata(m, max)
		wantPlain, wantPreserved := refPlainMetadata(m, max)
		if plain != wantPlain || plain && preserved != wantPreserved {
			t.Fatalf("plainMetadata(%v, %d) = %v, %v; want %v, %v", m, max, plain, preserved, wantPlain, wantPreserved)
		}
		l := Limits{MaxMetadataSize: max}
		want := refCheckMetadata("instance.metadata", m, l)
		if want == nil {
			want = checkBeatTimings(m)
		}
		if got := checkInstanceMetadata(m, l); errText(got) != errText(want) {
			t.Fatalf("checkInstanceMetadata(%v): got %s, want %s", m, errText(got), errText(want))
		}
		for _, s := range []string{m.p, k1 + v1 + k2 + v2 + k3 + v3} {
			n := 0
			for i := 0; i < len(s); i++ {
				if s[i] < ' ' || s[i] > '~' {
					n++
				}
			}
			if got := outsideText(s); got != n {
				t.Fatalf("outsideText(%q) = %d, want %d", s, got, n)
			}
		}
	})
}
