package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"github.com/muster-io/muster/registry/console"
)

// fill registers n services of two instances each.
func fill(tb testing.TB, reg *registry.Registry, n int) {
	tb.Helper()
	ctx := context.Background()
	for i := range n {
		svc := model.ServiceKey{Group: fmt.Sprintf("g%d", i%10), Name: fmt.Sprintf("svc-%05d", i)}
		for p := 1; p <= 2; p++ {
			if err := reg.Register(ctx, model.NewInstance(svc, fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), p)); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// TestTenThousandServices: at 10,000 services the search finds the one
// asked for, and the pages partition the namespace.
func TestTenThousandServices(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	reg := newRegistry(t)
	fill(t, reg, 10000)
	srv, _ := server(t, reg, nil)
	_, d := getJSON(t, srv, "/api/services?q=svc-04242")
	if d["Total"] != float64(1) || !strings.Contains(jsonOf(d["Rows"]), "svc-04242") {
		t.Fatalf("the search for svc-04242: %v", jsonOf(d))
	}
	_, d = getJSON(t, srv, "/api/services?page=200")
	if d["Total"] != float64(10000) || d["Pages"] != float64(200) || len(d["Rows"].([]any)) != 50 {
		t.Fatalf("page 200: total %v pages %v rows %d", d["Total"], d["Pages"], len(d["Rows"].([]any)))
	}
	if code, body := get(t, srv, "/?page=200"); code != 200 || strings.Contains(body, `id="next"`) || !strings.Contains(body, `id="prev"`) {
		t.Fatalf("the last page: %d, or its pager is wrong", code)
	}
}

// BenchmarkServicesPage is the services page (HTML, rendered) of a namespace
// of 10,000 services: the first page, a later one, and a search.
func BenchmarkServicesPage(b *testing.B) {
	reg := newRegistry(b)
	fill(b, reg, 10000)
	// The default sample interval (the test server's samples every 20 ms,
	// each a walk of the index).
	_, c := server(b, reg, func(c *console.Config) { c.SampleInterval = console.DefaultConfig().SampleInterval })
	for _, path := range []string{"/", "/?page=150", "/?q=svc-0999"} {
		b.Run(strings.TrimPrefix(path, "/?"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, path, nil)
				req.Host = "127.0.0.1"
				c.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatal(rec.Code, rec.Body.String())
				}
			}
		})
	}
}
