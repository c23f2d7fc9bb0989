package main

import (
	"bytes"
	"context"
	"errors"
	"image/color"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// timelineBin is the width of a timeline's bins.
const timelineBin = 100 * time.Millisecond

// answerKinds are the answers a timeline counts, in the chart's order.
var answerKinds = []string{"201", "replay", "409", "5xx", "no answer"}

// timeline counts the answers the clients got to their creates, per
// timelineBin from the scenario's start, and when the fault began and ended.
type timeline struct {
	start            time.Time
	mu               sync.Mutex
	bins             map[string][]int // by answer kind
	injected, healed time.Duration    // from start
	// successes are the 201s (first or replayed): when each attempt was
	// sent and answered, to find the first after a moment (a failover's
	// crash: the new primary's first answer).
	successes [][2]time.Time
}

// success notes a 201 to an attempt sent at sent.
func (t *timeline) success(sent time.Time, resp *http.Response) {
	if t == nil || resp == nil || resp.StatusCode != http.StatusCreated {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.successes = append(t.successes, [2]time.Time{sent, time.Now()})
}

// firstSuccessAfter is when the first 201 came to an attempt sent after
// at (zero: none did).
func (t *timeline) firstSuccessAfter(at time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first time.Time
	for _, s := range t.successes {
		if s[0].After(at) && (first.IsZero() || s[1].Before(first)) {
			first = s[1]
		}
	}
	return first
}

func newTimeline() *timeline { return &timeline{start: time.Now(), bins: map[string][]int{}} }

// add counts one attempt's answer: its response, or the error it met (a
// move to the other replica, a cancel, is not an answer).
func (t *timeline) add(resp *http.Response, err error) {
	if t == nil {
		return
	}
	var kind string
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		return
	case err != nil:
		kind = "no answer"
	case resp.StatusCode == http.StatusCreated && resp.Header.Get("Idempotent-Replayed") == "true":
		kind = "replay"
	case resp.StatusCode == http.StatusCreated:
		kind = "201"
	case resp.StatusCode == http.StatusConflict:
		kind = "409"
	case resp.StatusCode >= 500:
		kind = "5xx"
	default:
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	i := int(time.Since(t.start) / timelineBin)
	for len(t.bins[kind]) <= i {
		t.bins[kind] = append(t.bins[kind], 0)
	}
	t.bins[kind][i]++
}

// mark sets *at, the fault's start or end, to now.
func (t *timeline) mark(at *time.Duration) {
	t.mu.Lock()
	*at = time.Since(t.start)
	t.mu.Unlock()
}

// chartFile is the name of scenario name's timeline, next to the report.
func chartFile(name string) string { return "chaos-" + name + ".svg" }

// writeCharts writes the timeline of each scenario into dir.
func (r *report) writeCharts(dir string) error {
	for _, res := range r.results {
		b, err := res.timeline.svg(res.scenario.name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, chartFile(res.scenario.name)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// svg draws the timeline: a line per answer kind, the fault's start and
// end as vertical lines.
func (t *timeline) svg(title string) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, "seconds", "answers per 100 ms"
	p.Add(plotter.NewGrid())
	top := 1
	for i, kind := range answerKinds {
		xys := plotter.XYs{}
		for j, n := range t.bins[kind] {
			xys = append(xys, plotter.XY{X: (time.Duration(j) * timelineBin).Seconds(), Y: float64(n)})
			top = max(top, n)
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		p.Add(l)
		p.Legend.Add(kind, l)
	}
	for _, m := range []struct {
		name string
		at   time.Duration
		dash []vg.Length
	}{{"fault starts", t.injected, []vg.Length{vg.Points(6), vg.Points(3)}}, {"fault ends", t.healed, []vg.Length{vg.Points(2), vg.Points(2)}}} {
		l, err := plotter.NewLine(plotter.XYs{{X: m.at.Seconds(), Y: 0}, {X: m.at.Seconds(), Y: float64(top)}})
		if err != nil {
			return nil, err
		}
		l.Color, l.Dashes, l.Width = color.Black, m.dash, vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(m.name, l)
	}
	// Headroom above the busiest bin, so the legend does not cover the
	// burst of answers after a heal.
	p.Y.Min, p.Y.Max = 0, 1.4*float64(top)
	p.Legend.Top = true
	c := vgsvg.New(8*vg.Inch, 3*vg.Inch)
	p.Draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
