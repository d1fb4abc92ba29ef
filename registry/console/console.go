package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/jonboulle/clockwork"
)

//go:embed assets
var assets embed.FS

// Console is the web console, an http.Handler. New builds it, Start starts
// the sampler of its charts, Close ends its event streams and stops it.
// ServeHTTP may be called concurrently, before Start too (the charts are
// then empty).
type Console struct {
	cfg    Config
	eng    engine
	clock  clockwork.Clock
	log    *slog.Logger
	pages  *template.Template
	static http.Handler
	mux    *http.ServeMux
	stats  *sampler
	slots  chan struct{} // one per open event stream

	mu      sync.Mutex
	started bool
	closed  bool
	ctx     context.Context // cancelled by Close: ends streams and the sampler
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New validates cfg and returns a console that has not started its sampler.
func New(cfg Config) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, eng: nodes{list: cfg.Nodes}, clock: cfg.Clock, log: cfg.Logger,
		slots: make(chan struct{}, cfg.MaxStreams)}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	var err error
	c.pages, err = template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	static, _ := fs.Sub(assets, "assets/static")
	c.static = http.StripPrefix("/static/", http.FileServerFS(static))
	c.stats = newSampler(cfg.Samples)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.routes()
	return c, nil
}

// Start starts the sampler of the charts: a goroutine that reads the nodes'
// counters every SampleInterval until Close. ctx bounds Start only.
func (c *Console) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.started:
		return errors.New("console: already started")
	}
	c.started = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.sampleLoop()
	}()
	return nil
}

// Close ends the open event streams, stops the sampler and waits for it and
// for the streams' handlers to return. It is idempotent.
func (c *Console) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	return nil
}

// goStream runs a stream's handler body counted in wg, so that Close waits
// for it; it reports false once the console is closed.
func (c *Console) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

func (c *Console) sampleLoop() {
	t := c.clock.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	c.stats.add(c.clock.Now(), c.eng.sample())
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.Chan():
			c.stats.add(c.clock.Now(), c.eng.sample())
		}
	}
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", c.pageServices)
	m.HandleFunc("GET /service", c.pageService)
	m.HandleFunc("GET /instance", c.pageInstance)
	m.HandleFunc("GET /cluster", c.pageCluster)
	m.Handle("GET /static/", c.static)
	m.HandleFunc("GET /api/me", c.apiMe)
	m.HandleFunc("GET /api/events", c.apiEvents)
	m.HandleFunc("GET /api/services", c.apiServices)
	m.HandleFunc("GET /api/service", c.apiService)
	m.HandleFunc("GET /api/instance", c.apiInstance)
	m.HandleFunc("GET /api/cluster", c.apiCluster)
	m.HandleFunc("POST /api/compare", c.apiCompare)
	m.HandleFunc("POST /api/patch", c.apiPatch)
	m.HandleFunc("POST /api/unpatch", c.apiUnpatch)
	m.HandleFunc("POST /api/service", c.apiUpdateService)
	m.HandleFunc("POST /api/deregister", c.apiDeregister)
	c.mux = m
}

// ServeHTTP serves the console. Mount it at a path of its own with
// http.StripPrefix (its links are relative, so any prefix works):
//
//	mux.Handle("/console/", http.StripPrefix("/console", c))
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No script, style, frame or connection but the console's own; no
	// referrer (the token travels in the URL); nothing cached.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if c.cfg.Authorize == nil && !loopbackHost(r.Host) {
		// Without authentication the console trusts whoever reaches it,
		// which must then be this machine: a page of another site that
		// resolves its name to 127.0.0.1 (DNS rebinding) sends its own
		// Host.
		http.Error(w, "console: no authentication is configured, so only a loopback Host is served", http.StatusForbidden)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// loopbackHost reports whether host (a Host header, with or without a port)
// names this machine: localhost or a loopback address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// who is the outcome of authorization for one request.
type who struct {
	User     string
	Auth     bool // an Authorize hook is configured
	CanWrite bool // the user may write to the namespace at hand
}

// authorize asks the hook for namespace ns; on refusal it answers the
// request and returns false.
func (c *Console) authorize(w http.ResponseWriter, r *http.Request, ns string, write bool) (who, bool) {
	if c.cfg.Authorize == nil {
		return who{CanWrite: true}, true
	}
	user, err := c.cfg.Authorize(r, ns, write)
	if err != nil {
		code := http.StatusForbidden
		if errors.Is(err, ErrUnauthenticated) {
			code = http.StatusUnauthorized
		}
		if wantsHTML(r) {
			c.renderLogin(w, r, code, err)
		} else {
			writeError(w, code, err)
		}
		return who{}, false
	}
	u := who{User: user, Auth: true, CanWrite: write}
	if !write {
		_, err := c.cfg.Authorize(r, ns, true)
		u.CanWrite = err == nil
	}
	return u, true
}

// wantsHTML reports whether r is a page load (the answer to a refusal is
// then the login page).
func wantsHTML(r *http.Request) bool {
	return !strings.HasPrefix(r.URL.Path, "/api/")
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// page is what every template gets: the request's links and the user, and
// the page's own data.
type page struct {
	Title string
	Nav   string // which tab is current
	Who   who
	Token string // the accessToken query parameter, carried on every link
	Login string // Config.LoginURL
	// Stream is the event stream that refreshes the live part; Live names
	// the template of the live part.
	Stream string
	Live   string
	Data   any
	Error  string
}

// Link returns the relative URL of a console path with the query kv (name,
// value pairs) and the request's access token.
func (p *page) Link(path string, kv ...any) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(toString(kv[i]), toString(kv[i+1]))
	}
	if p.Token != "" {
		q.Set("accessToken", p.Token)
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

func (c *Console) newPage(r *http.Request, u who, title, nav string) *page {
	return &page{Title: title, Nav: nav, Who: u, Token: r.URL.Query().Get("accessToken"), Login: c.cfg.LoginURL}
}

func (c *Console) render(w http.ResponseWriter, code int, p *page) {
	var buf bytes.Buffer
	if err := c.pages.ExecuteTemplate(&buf, "layout", p); err != nil {
		c.log.Error("console: rendering a page", "page", p.Nav, "err", err)
		http.Error(w, "console: rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// renderLive renders only the live part of p, as the event streams send it.
func (c *Console) renderLive(p *page) ([]byte, error) {
	var buf bytes.Buffer
	err := c.pages.ExecuteTemplate(&buf, p.Live, p)
	return buf.Bytes(), err
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, code int, err error) {
	p := c.newPage(r, who{Auth: true}, "Sign in", "login")
	p.Live = "login"
	if code == http.StatusForbidden {
		p.Error = "You may not see this page: " + err.Error()
	}
	c.render(w, code, p)
}
