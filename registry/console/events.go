package console

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/muster-io/muster/model"
)

// The event streams (server-sent events): each page opens one, which sends
// the page's live part again, rendered by the server, each time what it
// shows changed. The registry's watches drive them: a Watch of the service
// on a service's page and an instance's, the namespace's WatchServices and a
// Watch of every service shown on the services page; the cluster page is
// sampled every SampleInterval. Changes within streamDebounce are sent as
// one.

const (
	streamDebounce = 50 * time.Millisecond
	streamPing     = 15 * time.Second
	// streamRetry is the delay, in milliseconds, after which a browser
	// reopens a stream that ended.
	streamRetry = "2000"
)

func (c *Console) apiEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	view := q.Get("view")
	var (
		ns      string
		svc     model.ServiceKey
		inst    model.InstanceKey
		err     error
		pageTpl string
	)
	switch view {
	case "services":
		ns, pageTpl = nsParam(q), "live-services"
	case "service":
		svc, err = serviceParam(q)
		ns, pageTpl = svc.Namespace, "live-service"
	case "instance":
		inst, err = instanceParam(q)
		svc, ns, pageTpl = inst.Service, inst.Service.Namespace, "live-instance"
	case "cluster":
		pageTpl = "live-cluster"
	default:
		err = errors.New("view: must be services, service, instance or cluster")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	u, ok := c.authorize(w, r, ns, false)
	if !ok {
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, errors.New("console: the server cannot stream"))
		return
	}
	select {
	case c.slots <- struct{}{}:
		defer func() { <-c.slots }()
	default:
		writeError(w, http.StatusServiceUnavailable, errors.New("console: too many event streams open (MaxStreams)"))
		return
	}
	if !c.enter() {
		writeError(w, http.StatusServiceUnavailable, ErrClosed)
		return
	}
	defer c.wg.Done()

	ctx, cancel := context.WithCancel(r.Context())
	stopOnClose := context.AfterFunc(c.ctx, cancel)
	defer stopOnClose()
	var watchers sync.WaitGroup
	defer watchers.Wait() // after cancel, below
	defer cancel()

	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	// follow runs a watch until its context ends, signalling each change.
	follow := func(wctx context.Context, next func(context.Context) error, stop func()) {
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			defer stop()
			for next(wctx) == nil {
				signal()
			}
		}()
	}
	watchService := func(wctx context.Context, key model.ServiceKey) error {
		next, stop, err := c.eng.watchService(wctx, key)
		if err == nil {
			follow(wctx, next, stop)
		}
		return err
	}

	p := c.newPage(r, u, "", view)
	p.Live = pageTpl
	// shown holds the watches of the services page's rows, by service.
	shown := map[model.ServiceKey]context.CancelFunc{}
	var build func() error
	switch view {
	case "services":
		next, stop, err := c.eng.watchCatalog(ctx, ns)
		if err == nil {
			follow(ctx, next, stop)
		}
		build = func() error {
			if err != nil {
				return err
			}
			d, err := c.servicesData(ctx, r, q)
			p.Data = d
			keep := map[model.ServiceKey]bool{}
			for _, row := range d.Rows {
				keep[row.Key] = true
				if shown[row.Key] == nil {
					wctx, stop := context.WithCancel(ctx)
					shown[row.Key] = stop
					if werr := watchService(wctx, row.Key); werr != nil {
						return werr
					}
				}
			}
			for key, stop := range shown {
				if !keep[key] {
					stop()
					delete(shown, key)
				}
			}
			return err
		}
	case "service":
		err := watchService(ctx, svc)
		pageNo := pageParam(q)
		build = func() error {
			if err != nil {
				return err
			}
			d, err := c.serviceData(ctx, svc, pageNo)
			p.Data = d
			return err
		}
	case "instance":
		err := watchService(ctx, svc)
		c.tickEvery(ctx, &watchers, signal)
		build = func() error {
			p.Data = c.instanceData(inst)
			return err
		}
	case "cluster":
		c.tickEvery(ctx, &watchers, signal)
		signal()
		build = func() error {
			p.Data = c.clusterData()
			return nil
		}
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("retry: " + streamRetry + "\n\n"))
	fl.Flush()

	ping := c.clock.NewTicker(streamPing)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.Chan():
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return
			}
			fl.Flush()
			continue
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(streamDebounce):
		}
		p.Error = ""
		if err := build(); err != nil {
			p.Error = err.Error()
		}
		b, err := c.renderLive(p)
		if err != nil {
			c.log.Error("console: rendering a stream's update", "view", view, "err", err)
			return
		}
		if _, err := w.Write(sseEvent("live", b)); err != nil {
			return
		}
		fl.Flush()
	}
}

// tickEvery signals every SampleInterval until ctx ends.
func (c *Console) tickEvery(ctx context.Context, wg *sync.WaitGroup, signal func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := c.clock.NewTicker(c.cfg.SampleInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.Chan():
				signal()
			}
		}
	}()
}

// sseEvent frames data as one server-sent event named name: every line of
// data becomes a data: line (a carriage return would end one early, so
// they go).
func sseEvent(name string, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString("event: ")
	b.WriteString(name)
	b.WriteByte('\n')
	for line := range bytes.SplitSeq(bytes.ReplaceAll(data, []byte("\r"), nil), []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return b.Bytes()
}
