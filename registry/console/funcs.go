package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/muster-io/muster/model"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"pct":    func(f float64) string { return strconv.FormatFloat(f*100, 'f', -1, 64) + "%" },
	"weight": func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
	"inc":    func(n int) int { return n + 1 },
	"dec":    func(n int) int { return n - 1 },
	"clock":  func(t time.Time) string { return t.Format("15:04:05.000") },
	"unixms": func(t time.Time) int64 { return t.UnixMilli() },
	"secs":   func(d time.Duration) string { return d.Round(time.Second).String() },
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"metaList":  metaList,
	"checkText": checkText,
	"pubText":   pubText,
}

type kv struct{ K, V string }

// metaList returns m's entries sorted by key.
func metaList(m model.Metadata) []kv {
	var out []kv
	for k, v := range m.All() {
		out = append(out, kv{k, v})
	}
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.K, b.K) })
	return out
}

func checkText(h model.HealthCheck) string {
	t := h.EffectiveType()
	var b strings.Builder
	b.WriteString(string(t))
	if h.Port != 0 {
		fmt.Fprintf(&b, " port %d", h.Port)
	}
	switch t {
	case model.CheckHTTP:
		path := h.Path
		if path == "" {
			path = "/"
		}
		fmt.Fprintf(&b, " GET %s", path)
		if len(h.ExpectedCodes) > 0 {
			fmt.Fprintf(&b, " expecting %v", h.ExpectedCodes)
		}
	case model.CheckMySQL:
		if h.User != "" {
			fmt.Fprintf(&b, " as %s", h.User)
		}
	}
	return b.String()
}

func pubText(p publisher) string {
	switch p.Kind {
	case "persistent":
		return "persistent store (Raft)"
	case "beat":
		s := "beats from " + p.ID
		if p.Node != "" {
			s += ", lease on " + p.Node
		}
		return s
	}
	s := "session " + p.ID
	if p.Node != "" {
		s += " of " + p.Node
	}
	return s
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	}
	return fmt.Sprint(v)
}
