package console

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// The charts: the sampler reads every node's counters each SampleInterval
// into a small ring per node, and the cluster page draws them as inline SVG
// polylines, computed here: no charting library, no script.

// maxChartNodes bounds the nodes the sampler keeps series for.
const maxChartNodes = 64

type point struct {
	At        time.Time
	Writes    float64 // write calls per second since the previous sample
	P99       float64 // watch delivery, 99th percentile over the interval, in ms (NaN: none)
	Instances float64
}

type series struct {
	points []point
	last   nodeSample
	lastAt time.Time
	round  int // the sample it was last read in
}

type sampler struct {
	mu    sync.Mutex
	size  int
	nodes map[string]*series
	n     int // samples taken
}

func newSampler(size int) *sampler {
	return &sampler{size: size, nodes: map[string]*series{}}
}

func (s *sampler) add(now time.Time, samples []nodeSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	for _, ns := range samples {
		sr := s.nodes[ns.Node]
		if sr == nil {
			if len(s.nodes) >= maxChartNodes {
				continue
			}
			sr = &series{}
			s.nodes[ns.Node] = sr
		}
		p := point{At: now, Instances: float64(ns.Instances), P99: math.NaN()}
		if !sr.lastAt.IsZero() {
			if dt := now.Sub(sr.lastAt).Seconds(); dt > 0 && ns.Writes >= sr.last.Writes {
				p.Writes = float64(ns.Writes-sr.last.Writes) / dt
			}
			p.P99 = deltaQuantile(sr.last.Delivery, ns.Delivery, ns.Bounds, 0.99)
		}
		sr.last, sr.lastAt, sr.round = ns, now, s.n
		if len(sr.points) == s.size {
			copy(sr.points, sr.points[1:])
			sr.points = sr.points[:s.size-1]
		}
		sr.points = append(sr.points, p)
	}
	// A node unsampled for a whole ring leaves the charts.
	for id, sr := range s.nodes {
		if s.n-sr.round > s.size {
			delete(s.nodes, id)
		}
	}
}

func (s *sampler) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// deltaQuantile is the q-quantile, in ms, of the observations between two
// snapshots of one histogram (bucket counts), as the upper bound of the
// bucket it falls in; NaN without observations.
func deltaQuantile(before, after []uint64, bounds []time.Duration, q float64) float64 {
	if len(after) == 0 || len(bounds) == 0 {
		return math.NaN()
	}
	var total uint64
	delta := make([]uint64, len(after))
	for i := range after {
		if i < len(before) && before[i] <= after[i] {
			delta[i] = after[i] - before[i]
		} else if i >= len(before) {
			delta[i] = after[i]
		}
		total += delta[i]
	}
	if total == 0 {
		return math.NaN()
	}
	want := uint64(math.Ceil(q * float64(total)))
	var cum uint64
	for i, d := range delta {
		cum += d
		if cum >= want {
			return float64(bounds[min(i, len(bounds)-1)]) / float64(time.Millisecond)
		}
	}
	return float64(bounds[len(bounds)-1]) / float64(time.Millisecond)
}

// chart is one drawn chart: a polyline per node.
type chart struct {
	Title string
	Max   string // the top of the y axis, with its unit
	Lines []chartLine
	Empty bool
	Last  string // the local node's latest value
}

type chartLine struct {
	Node   string
	Class  string
	Points string // SVG polyline points
}

// The charts' drawing box.
const (
	chartW = 600
	chartH = 120
)

func (s *sampler) charts() []chart {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(mapKeys(s.nodes))
	var from, to time.Time
	for _, id := range ids {
		pts := s.nodes[id].points
		if len(pts) == 0 {
			continue
		}
		if from.IsZero() || pts[0].At.Before(from) {
			from = pts[0].At
		}
		if pts[len(pts)-1].At.After(to) {
			to = pts[len(pts)-1].At
		}
	}
	mk := func(title, unit string, get func(point) float64) chart {
		ch := chart{Title: title}
		top := 0.0
		for _, id := range ids {
			for _, p := range s.nodes[id].points {
				if v := get(p); !math.IsNaN(v) {
					top = max(top, v)
				}
			}
		}
		top = niceCeil(top)
		ch.Max = formatValue(top) + unit
		span := to.Sub(from).Seconds()
		for i, id := range ids {
			var b strings.Builder
			for _, p := range s.nodes[id].points {
				v := get(p)
				if math.IsNaN(v) {
					v = 0
				}
				x := float64(chartW)
				if span > 0 {
					x = p.At.Sub(from).Seconds() / span * chartW
				}
				y := chartH - v/top*chartH
				fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
			}
			ch.Lines = append(ch.Lines, chartLine{Node: id, Class: fmt.Sprintf("n%d", i%8), Points: strings.TrimSpace(b.String())})
		}
		ch.Empty = len(ch.Lines) == 0 || span == 0
		return ch
	}
	return []chart{
		mk("Writes", "/s", func(p point) float64 { return p.Writes }),
		mk("Watch delivery p99", " ms", func(p point) float64 { return p.P99 }),
		mk("Instances", "", func(p point) float64 { return p.Instances }),
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func formatValue(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// The timeline of an instance: one lane per node, a mark per event.

type timeline struct {
	Width, Height int
	Lanes         []lane
	Ticks         []tick
	Empty         bool
}

type lane struct {
	Node  string
	Y     int
	Marks []mark
}

type mark struct {
	X float64
	Y int
	// LabelY places Label, shown for removals, health flips and patches.
	LabelY int
	Class  string
	Title  string
	Label  string
	Anchor string // the label's text-anchor
}

type tick struct {
	X      float64
	Label  string
	Anchor string
}

// anchor is the text-anchor that keeps a label at x inside the timeline.
func anchor(x float64) string {
	switch {
	case x < tlLeft+100:
		return "start"
	case x > tlW-tlRight-100:
		return "end"
	}
	return "middle"
}

const (
	tlLeft  = 90
	tlRight = 20
	tlW     = 900
	tlLane  = 46
)

func drawTimeline(nodes []nodeHistory, now time.Time) timeline {
	t := timeline{Width: tlW}
	var from, to time.Time
	for _, n := range nodes {
		for _, ev := range n.Events {
			if from.IsZero() || ev.At.Before(from) {
				from = ev.At
			}
			if ev.At.After(to) {
				to = ev.At
			}
		}
	}
	t.Height = 30 + tlLane*max(1, len(nodes))
	if from.IsZero() {
		t.Empty = true
		return t
	}
	span := to.Sub(from)
	if span < time.Second {
		span = time.Second
	}
	inner := float64(tlW - tlLeft - tlRight)
	xOf := func(at time.Time) float64 { return tlLeft + float64(at.Sub(from))/float64(span)*inner }
	for i, n := range nodes {
		l := lane{Node: n.Node, Y: 20 + i*tlLane + tlLane/2}
		for _, ev := range n.Events {
			cls := "ev"
			switch {
			case ev.Removed:
				cls = "ev removed"
			case ev.Bad:
				cls = "ev bad"
			case ev.Patch || ev.PatchGone:
				cls = "ev patch"
			case ev.Kind == "healthy":
				cls = "ev good"
			}
			title := ev.At.Format("15:04:05.000") + " " + ev.Kind
			if ev.Reason != "" {
				title += ": " + ev.Reason
			}
			label := ""
			switch {
			case ev.Removed:
				label = "removed: " + ev.Reason
			case ev.Bad, ev.Patch, ev.PatchGone, ev.Kind == "healthy":
				label = ev.Kind
			}
			x := xOf(ev.At)
			l.Marks = append(l.Marks, mark{X: x, Y: l.Y, LabelY: l.Y + 18, Class: cls, Title: title, Label: label, Anchor: anchor(x)})
		}
		t.Lanes = append(t.Lanes, l)
	}
	for i := 0; i <= 4; i++ {
		at := from.Add(span * time.Duration(i) / 4)
		t.Ticks = append(t.Ticks, tick{X: xOf(at), Label: at.Format("15:04:05.000"), Anchor: anchor(xOf(at))})
	}
	return t
}
