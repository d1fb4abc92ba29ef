package model

import (
	"math"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Length limits. Nacos's limits are the floor; the character rules below go
// further than Nacos does.
const (
	MaxNamespaceLen   = 64
	MaxGroupLen       = 128
	MaxServiceNameLen = 512
	MaxClusterLen     = 64
	MaxHostLen        = 253
	MaxInstanceIDLen  = 1024
	MaxPathLen        = 1024
	MaxCheckCodes     = 16
	MaxCredentialLen  = 256
	MaxCommandLen     = 4096

	// DefaultMaxMetadataSize caps the sum of the lengths, in characters, of
	// the keys and values of one metadata set, as Nacos does.
	DefaultMaxMetadataSize = 1024
)

// Limits holds the configurable validation limits. Its zero value uses the
// defaults.
type Limits struct {
	// MaxMetadataSize caps the sum of key and value lengths, in characters,
	// of one metadata set (instance, service, cluster or patch); 0 means
	// DefaultMaxMetadataSize.
	MaxMetadataSize int
}

func (l Limits) maxMetadata() int {
	if l.MaxMetadataSize > 0 {
		return l.MaxMetadataSize
	}
	return DefaultMaxMetadataSize
}

// Validate checks k; empty Namespace and Group stand for their defaults.
func (k ServiceKey) Validate() error {
	k = k.WithDefaults()
	if err := checkName("service.namespace", k.Namespace, MaxNamespaceLen, &namespaceChars, "letters, digits, '_' and '-'"); err != nil {
		return err
	}
	if err := checkName("service.group", k.Group, MaxGroupLen, &groupChars, "letters, digits, '_', '-', '.' and ':'"); err != nil {
		return err
	}
	if k.Group == "." || k.Group == ".." {
		return invalid("service.group", `must not be "." or ".."`, k.Group)
	}
	return checkServiceName(k.Name)
}

// Validate checks k; empty names stand for their defaults.
func (k InstanceKey) Validate() error {
	if err := k.Service.Validate(); err != nil {
		return err
	}
	return checkEndpoint(k.Cluster, k.IP, k.Port)
}

// checkEndpoint checks an instance key's cluster, IP and port.
func checkEndpoint(cluster, ip string, port int) error {
	if err := checkCluster("instance.cluster", cluster); err != nil {
		return err
	}
	if err := checkHost("instance.ip", ip); err != nil {
		return err
	}
	return checkPort("instance.port", port, false)
}

// Validate checks every field of i against the rules and l.
func (i Instance) Validate(l Limits) error {
	if err := i.Service.Validate(); err != nil {
		return err
	}
	return i.ValidateInService(l)
}

// ValidateInService is Validate without the check of i.Service, for a
// caller that holds the service already and checked its key when it took it:
// every other field is checked as Validate checks it, with the same errors.
// The registry's registration path uses it for a service its index holds,
// sparing each new instance a second pass over the service's names. Such a
// key passed Validate when the service entered the index, on this node or,
// for a replicated one, on the node that proposed or sent it; after an
// upgrade that tightens the rules for names, a service that exists takes
// instances without its key being checked again by the new rules.
func (i Instance) ValidateInService(l Limits) error {
	return i.ValidateInServiceIPv4(l, false)
}

// ValidateInServiceIPv4 is ValidateInService for a caller that may have
// parsed i.IP already: with ipv4 true, the caller vouches that it is a
// plain IPv4 address, a dotted quad of one- to three-digit decimal fields
// of at most 255 without leading zeros, not 0.0.0.0 (which the host rules
// refuse as unspecified), and the IP's check is not made again: a caller
// that passes true for any other IP stores it unchecked. With ipv4 false,
// it is ValidateInService. The registry's registration path parses the IP
// for its index's search (and passes true only for the key that parse
// gave); it is every registration's path.
func (i Instance) ValidateInServiceIPv4(l Limits, ipv4 bool) error {
	if ipv4 {
		if err := checkCluster("instance.cluster", i.Cluster); err != nil {
			return err
		}
		if err := checkPort("instance.port", i.Port, false); err != nil {
			return err
		}
	} else if err := checkEndpoint(i.Cluster, i.IP, i.Port); err != nil {
		return err
	}
	if i.ID != "" {
		if err := checkPrintable("instance.id", i.ID, MaxInstanceIDLen); err != nil {
			return err
		}
	}
	if err := checkWeight("instance.weight", i.Weight); err != nil {
		return err
	}
	return checkInstanceMetadata(i.Metadata, l)
}

// checkInstanceMetadata is checkMetadata("instance.metadata", m, l), then
// checkBeatTimings(m): plainMetadata's pass tells, besides, whether a key
// has the preserved prefix, so the common instance's metadata, plain and
// without beat timings, is walked once.
func checkInstanceMetadata(m Metadata, l Limits) error {
	plain, preserved := plainMetadata(m, l.maxMetadata())
	if plain && !preserved {
		return nil
	}
	if !plain {
		if err := checkMetadataRules("instance.metadata", m, l); err != nil {
			return err
		}
	}
	return checkBeatTimings(m)
}

// Validate checks p against the rules and l.
func (p *InstancePatch) Validate(l Limits) error {
	if err := p.Key.Validate(); err != nil {
		return err
	}
	if p.Empty() {
		return invalid("patch", "must set weight, enabled or metadata", "")
	}
	if p.Weight != nil {
		if err := checkWeight("patch.weight", *p.Weight); err != nil {
			return err
		}
	}
	for _, key := range beatTimingKeys {
		if _, ok := p.Metadata.Get(key); ok {
			return invalid("patch.metadata["+key+"]", "beat timings belong to the publisher's registration, not to a patch", "")
		}
	}
	return checkMetadata("patch.metadata", p.Metadata, l)
}

// Validate checks s against the rules and l.
func (s *Service) Validate(l Limits) error {
	if err := s.Key.Validate(); err != nil {
		return err
	}
	t := s.ProtectThreshold
	if math.IsNaN(t) || t < 0 || t > 1 {
		return invalidNumber("service.protectThreshold", "must be a number in [0, 1]", strconv.FormatFloat(t, 'g', -1, 64))
	}
	if err := checkMetadata("service.metadata", s.Metadata, l); err != nil {
		return err
	}
	seen := make(map[string]bool, len(s.Clusters))
	for i := range s.Clusters {
		c := &s.Clusters[i]
		name := c.Name
		if name == "" {
			name = DefaultCluster
		}
		field := "service.clusters[" + strconv.Itoa(i) + "]"
		if err := checkCluster(field+".name", name); err != nil {
			return err
		}
		if seen[name] {
			return invalid(field+".name", "must be unique within the service", name)
		}
		seen[name] = true
		if err := checkMetadata(field+".metadata", c.Metadata, l); err != nil {
			return err
		}
		if err := c.HealthCheck.validate(field+".healthCheck", l); err != nil {
			return err
		}
	}
	return nil
}

func (h *HealthCheck) validate(field string, l Limits) error {
	switch h.Type {
	case "", CheckNone, CheckTCP, CheckHTTP, CheckMySQL:
	default:
		return invalid(field+".type", "must be NONE, TCP, HTTP or MYSQL", string(h.Type))
	}
	if err := checkPort(field+".port", h.Port, true); err != nil {
		return err
	}
	if h.Path != "" {
		if !strings.HasPrefix(h.Path, "/") {
			return invalid(field+".path", "must start with '/'", h.Path)
		}
		if err := checkPrintable(field+".path", h.Path, MaxPathLen); err != nil {
			return err
		}
	}
	for k, v := range h.Headers.All() {
		if k == "" || strings.IndexFunc(k, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
			return invalid(field+".headers", "names must be HTTP tokens", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return invalid(field+".headers["+k+"]", "must not contain CR, LF or NUL", v)
		}
	}
	if err := checkMetadata(field+".headers", h.Headers, l); err != nil {
		return err
	}
	if len(h.ExpectedCodes) > MaxCheckCodes {
		return invalid(field+".expectedCodes", "must hold at most "+strconv.Itoa(MaxCheckCodes)+" codes", "")
	}
	for _, c := range h.ExpectedCodes {
		if c < 100 || c > 599 {
			return invalidNumber(field+".expectedCodes", "must be HTTP status codes 100–599", strconv.Itoa(c))
		}
	}
	if len(h.User) > MaxCredentialLen || len(h.Password) > MaxCredentialLen {
		return invalid(field+".user", "user and password must be at most "+strconv.Itoa(MaxCredentialLen)+" bytes", "")
	}
	if len(h.Command) > MaxCommandLen {
		return invalid(field+".command", "must be at most "+strconv.Itoa(MaxCommandLen)+" bytes", "")
	}
	return nil
}

// Validate checks q.
func (q *Query) Validate() error {
	if err := q.Service.Validate(); err != nil {
		return err
	}
	for i, c := range q.Clusters {
		if err := checkCluster("query.clusters["+strconv.Itoa(i)+"]", c); err != nil {
			return err
		}
	}
	return nil
}

func checkServiceName(name string) error {
	const field = "service.name"
	switch {
	case name == "":
		return invalid(field, "must not be empty", "")
	case len(name) > MaxServiceNameLen:
		return invalid(field, "must be at most "+strconv.Itoa(MaxServiceNameLen)+" bytes", name)
	case name[0] == '@':
		return invalid(field, "must not start with '@'", name)
	}
	// One pass finds every breach; they are reported in the rules' order.
	doubleAt, unprintable := false, false
	pathLike := name[0] == '/'
	seg := 0 // where the current segment between slashes starts
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '/' {
			if s := name[seg:i]; s == "" || s == "." || s == ".." {
				pathLike = true
			}
			seg = i + 1
			continue
		}
		switch c := name[i]; {
		case c <= ' ' || c > '~':
			unprintable = true
		case c == '\\':
			pathLike = true
		case c == '@' && i > 0 && name[i-1] == '@':
			doubleAt = true
		}
	}
	switch {
	case doubleAt:
		return invalid(field, "must not contain \"@@\"", name)
	case unprintable:
		return invalid(field, "must be printable ASCII without spaces", name)
	case pathLike:
		return invalid(field, `must not be path-like (a backslash, a leading '/', or an empty, "." or ".." segment between slashes)`, name)
	}
	return nil
}

func checkCluster(field, name string) error {
	if name == "" {
		return nil // DefaultCluster
	}
	return checkName(field, name, MaxClusterLen, &namespaceChars, "letters, digits, '_' and '-'")
}

// charSet is a byte class; a table lookup keeps the validation of every
// registration cheap.
type charSet [256]bool

func newCharSet(extra string) charSet {
	var cs charSet
	for c := '0'; c <= '9'; c++ {
		cs[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		cs[c] = true
		cs[c-'a'+'A'] = true
	}
	for i := 0; i < len(extra); i++ {
		cs[extra[i]] = true
	}
	return cs
}

// The character classes. They are never written after initialisation.
var (
	namespaceChars = newCharSet("_-")              // namespaces and clusters
	groupChars     = newCharSet("_-.:")            // groups
	tokenChars     = newCharSet("_-!#$%&'*+.^`|~") // HTTP header names
)

func checkName(field, s string, max int, ok *charSet, chars string) error {
	if s == "" {
		return invalid(field, "must not be empty", "")
	}
	if len(s) > max {
		return invalid(field, "must be at most "+strconv.Itoa(max)+" bytes", s)
	}
	for i := 0; i < len(s); i++ {
		if !ok[s[i]] {
			return invalid(field, "may only hold "+chars, s)
		}
	}
	return nil
}

func isTokenChar(r rune) bool {
	return r < utf8.RuneSelf && tokenChars[byte(r)]
}

// checkHost accepts an IP address (not the unspecified one, which cannot be
// dialled) or a DNS name: labels of letters, digits, '-' and '_' (RFC 1123
// plus the underscore that real host names carry), not starting or ending
// with '-', an optional final dot, and a last label that is not all digits
// (such a name is a mistyped IPv4 address).
func checkHost(field, host string) error {
	if host == "" {
		return invalid(field, "must not be empty", "")
	}
	if len(host) > MaxHostLen {
		return invalid(field, "must be at most "+strconv.Itoa(MaxHostLen)+" bytes", host)
	}
	if plainIPv4(host) {
		return nil
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if addr.IsUnspecified() {
			return invalid(field, "must not be the unspecified address", host)
		}
		return nil
	}
	const rule = "must be an IP address or a DNS name"
	allDigits := false
	for label := range strings.SplitSeq(strings.TrimSuffix(host, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return invalid(field, rule, host)
		}
		allDigits = true
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return invalid(field, rule, host)
			}
			if c < '0' || c > '9' {
				allDigits = false
			}
		}
	}
	if allDigits {
		return invalid(field, rule, host)
	}
	return nil
}

// plainIPv4 reports, in one pass, whether host is a dotted-quad IPv4
// address that netip.ParseAddr parses and that is not 0.0.0.0: four
// decimal fields of one to three digits, each at most 255 and without a
// leading zero. It accepts nothing that checkHost's rules reject, and
// leaves every other form (IPv6, names, the unspecified address, errors)
// to them; FuzzPlainIPv4 holds it to netip.ParseAddr. Instance addresses
// are IPv4 almost always, and this is every registration's path.
func plainIPv4(host string) bool {
	if len(host) < len("1.1.1.1") || len(host) > len("255.255.255.255") {
		return false
	}
	fields, v, digits, nonzero := 0, 0, 0, false
	for i := 0; i <= len(host); i++ {
		if i == len(host) || host[i] == '.' {
			if digits == 0 || v > 255 {
				return false
			}
			fields++
			nonzero = nonzero || v != 0
			v, digits = 0, 0
			continue
		}
		c := host[i] - '0'
		if c > 9 || digits == 3 || digits == 1 && v == 0 { // not a digit, a fourth digit, a leading zero
			return false
		}
		v = v*10 + int(c)
		digits++
	}
	return fields == 4 && nonzero
}

func checkPort(field string, port int, zeroOK bool) error {
	lo := 1
	if zeroOK {
		lo = 0
	}
	if port < lo || port > 65535 {
		return invalidNumber(field, "must be "+strconv.Itoa(lo)+"–65535", strconv.Itoa(port))
	}
	return nil
}

func checkWeight(field string, w float64) error {
	if math.IsNaN(w) || w < 0 || w > MaxWeight {
		return invalidNumber(field, "must be a number in [0, 10000]", strconv.FormatFloat(w, 'g', -1, 64))
	}
	return nil
}

func checkPrintable(field, s string, max int) error {
	if len(s) > max {
		return invalid(field, "must be at most "+strconv.Itoa(max)+" bytes", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return invalid(field, "must be printable ASCII without spaces", s)
		}
	}
	return nil
}

// Validate checks m by the rules of every metadata set (see the package
// documentation): keys and values in valid UTF-8, non-empty keys without
// control characters, values without control characters other than tab,
// and at most l's MaxMetadataSize characters in all. The error matches
// ErrInvalid and names field. Instance, Service and InstancePatch check
// their metadata with it; a host uses it for string maps of its own (the
// registry's session labels).
func (m Metadata) Validate(field string, l Limits) error { return checkMetadata(field, m, l) }

func checkMetadata(field string, m Metadata, l Limits) error {
	if plain, _ := plainMetadata(m, l.maxMetadata()); plain {
		return nil
	}
	return checkMetadataRules(field, m, l)
}

// checkMetadataRules is checkMetadata rule by rule, naming the rule that m
// breaks, for metadata that plainMetadata does not pass.
func checkMetadataRules(field string, m Metadata, l Limits) error {
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

// plainMetadata reports whether m passes checkMetadata as the common case
// does: every key and value in ASCII (so valid UTF-8, one character a
// byte), no key empty, no control character but a tab in a value, and at
// most max bytes in all. When it does not, the rule-by-rule checks that
// name the broken rule decide, so it only spares the registration path
// their passes and never accepts more than they do. When m is plain,
// preserved reports whether a key starts with preservedPrefix (m.hasPrefix:
// the beat timings' keys).
//
// Metadata of at most 15 pairs whose strings are under 32 bytes, which is
// nearly all, has a header of one byte before the pairs and before each
// string, every one of them outside ' '–'~' (0x80–0x8f, 0xa0–0xbf). So
// after a walk of the headers (empty keys, the size, the prefix), one
// pass over the whole encoding, 8 bytes a step, counts the bytes outside
// ' '–'~': the text has none exactly when the count is the headers'. A
// count above it (a tab in a value, or a breach) is left to plainPairs,
// as is metadata of other headers.
func plainMetadata(m Metadata, max int) (plain, preserved bool) {
	p := m.p
	if p == "" {
		return max >= 0, false // as plainPairs: 0 bytes in all
	}
	if p[0]&0xf0 != 0x80 { // not a fixmap: 16 pairs or more
		return plainPairs(m, max)
	}
	n := 2 * int(p[0]&0x0f) // strings
	off := 1
	for i := 0; i < n && off < len(p); i++ {
		c := p[off]
		if c >= 0xc0 { // not a fixstr: 32 bytes or more
			return plainPairs(m, max)
		}
		next := off + 1 + int(c&0x1f)
		if i%2 == 0 {
			if next == off+1 {
				return false, false // an empty key
			}
			if next-off > len(preservedPrefix) && p[off+1:off+1+len(preservedPrefix)] == preservedPrefix {
				preserved = true
			}
		}
		off = next
	}
	if off != len(p) {
		return plainPairs(m, max)
	}
	if len(p)-1-n > max {
		return false, false // too large: every string's header is a byte
	}
	if outsideText(p) != 1+n {
		return plainPairs(m, max)
	}
	return true, preserved
}

// plainPairs is plainMetadata pair by pair, string by string, for any
// metadata.
func plainPairs(m Metadata, max int) (plain, preserved bool) {
	size := 0
	for i, off := 0, m.first(); off < len(m.p); i++ {
		s, next, ok := shortStrAt(m.p, off)
		if !ok {
			s, next = strAt(m.p, off)
		}
		off = next
		if i%2 == 0 {
			if s == "" {
				return false, false
			}
			preserved = preserved || strings.HasPrefix(s, preservedPrefix)
		}
		size += len(s)
		tab := i%2 == 1 // a value may hold a tab
		for j := 0; j < len(s); j++ {
			if c := s[j]; c-' ' >= 0x7f-' ' { // below ' ' (wrapped) or from DEL up
				if c != '\t' || !tab {
					return false, false
				}
			}
		}
	}
	return size <= max, preserved
}

// outsideText returns the number of bytes of p outside ' '–'~' (below
// 0x20 or from 0x7f up), 8 bytes a step.
func outsideText(p string) int {
	n, i := 0, 0
	for ; i+8 <= len(p); i += 8 {
		n += count8(outside8(load8(p, i)))
	}
	switch r := len(p) - i; {
	case r == 0:
	case len(p) >= 8:
		// The last 8 bytes, less the 8-r of them counted already (the
		// low ones: the load is little-endian).
		n += count8(outside8(load8(p, len(p)-8)) &^ (1<<(8*(8-r)) - 1))
	default:
		for ; i < len(p); i++ {
			if c := p[i]; c-' ' >= 0x7f-' ' {
				n++
			}
		}
	}
	return n
}

// load8 returns the 8 bytes of p from i as a little-endian word (one load
// where the target allows it).
func load8(p string, i int) uint64 {
	_ = p[i+7]
	return uint64(p[i]) | uint64(p[i+1])<<8 | uint64(p[i+2])<<16 | uint64(p[i+3])<<24 |
		uint64(p[i+4])<<32 | uint64(p[i+5])<<40 | uint64(p[i+6])<<48 | uint64(p[i+7])<<56
}

// outside8 returns, in bit 7 of each byte, whether that byte of x is
// outside ' '–'~'. The sums stay within their bytes (x7's bytes are at
// most 0x7f), so each byte's answer is exact.
func outside8(x uint64) uint64 {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	x7 := x &^ high
	below := ^(x7 + (0x80-' ')*ones) &^ x // bit 7: x7 < ' ' and bit 7 of x clear
	above := x7 + ones | x                // bit 7: x7 is 0x7f, or bit 7 of x set
	return (below | above) & high
}

// count8 returns the number of bits set in f, which has bit 7 of its bytes
// at most.
func count8(f uint64) int { return int((f >> 7) * 0x0101010101010101 >> 56) }

// isValueControl reports the characters metadata values may not hold: the
// control characters except tab.
func isValueControl(r rune) bool { return r != '\t' && unicode.IsControl(r) }

// beatTimingKeys are the preserved keys that set beat timings.
var beatTimingKeys = [...]string{MetaHeartBeatInterval, MetaHeartBeatTimeout, MetaIPDeleteTimeout}

// checkBeatTimings applies Nacos's rule (the interval must not exceed either
// timeout) and ours: values are whole milliseconds in (0, 1 day]. A beat
// timeout at or above the delete timeout is allowed, as in Nacos: the
// instance is then deleted without turning unhealthy first.
func checkBeatTimings(m Metadata) error {
	if !m.hasPrefix(preservedPrefix) {
		return nil
	}
	for _, key := range beatTimingKeys {
		if s, ok := m.Get(key); ok {
			if _, err := parseMillis(s); err != nil {
				return invalid("instance.metadata["+key+"]", "must be whole milliseconds in 1–86400000", s)
			}
		}
	}
	i := Instance{Metadata: m}
	t := i.BeatTimings()
	if t.Interval > t.Unhealthy || t.Interval > t.Delete {
		return invalid("instance.metadata["+MetaHeartBeatInterval+"]", "must not exceed the beat timeout or the delete timeout", t.Interval.String())
	}
	return nil
}
