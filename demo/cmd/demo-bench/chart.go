package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The charts of the report, written next to it (docs/bench.md links them).
const (
	throughputChart = "bench-throughput.svg"
	cpuChart        = "bench-cpu.svg"
)

// writeCharts writes the report's charts into dir.
func (r *report) writeCharts(dir string) error {
	charts := map[string]func() ([]byte, error){throughputChart: r.throughputSVG}
	if cpuMeasured {
		charts[cpuChart] = r.cpuSVG
	}
	return writeSVGs(dir, charts)
}

// writeSVGs writes each chart into dir, under its name.
func writeSVGs(dir string, charts map[string]func() ([]byte, error)) error {
	for name, draw := range charts {
		b, err := draw()
		if err != nil {
			return fmt.Errorf("chart %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// throughputSVG is two panels side by side: median req/s and median p99 by
// client count, a line per scenario (the legend on the p99 panel, whose top
// left is empty: latency is low at one client).
func (r *report) throughputSVG() ([]byte, error) {
	cs := cells(r.phases)
	rps, p99 := byClients("req/s by clients", "req/s"), byClients("p99 by clients", "p99 (ms)")
	for i, sc := range scenarios {
		var a, b plotter.XYs
		for _, c := range concurrencies {
			if x := cs[sc][c]; x != nil {
				a = append(a, plotter.XY{X: float64(c), Y: median(x.RPS)})
				b = append(b, plotter.XY{X: float64(c), Y: median(x.P99)})
			}
		}
		for _, pl := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{rps, a}, {p99, b}} {
			if len(pl.xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(pl.xys)
			if err != nil {
				return nil, err
			}
			l.Color, pts.Color, pts.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
			pl.p.Add(l, pts)
			if pl.p == p99 {
				p99.Legend.Add(sc, l, pts)
			}
		}
	}
	return sideBySide(rps, p99)
}

// sideBySide is the SVG of two panels, left and right.
func sideBySide(left, right *plot.Plot) ([]byte, error) {
	c := vgsvg.New(10*vg.Inch, 4*vg.Inch)
	tiles := plot.Align([][]*plot.Plot{{left, right}}, draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}, draw.New(c))
	left.Draw(tiles[0][0])
	right.Draw(tiles[0][1])
	return svgBytes(c)
}

// emptyPlot is a plot with a grid, its titles, and y from 0.
func emptyPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	return p
}

// byClients is an empty plot over the client counts.
func byClients(title, y string) *plot.Plot {
	p := emptyPlot(title, "clients", y)
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, c := range concurrencies {
		ticks = append(ticks, plot.Tick{Value: float64(c), Label: fmt.Sprint(c)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top, p.Legend.Left = true, true
	return p
}

// cpuSVG is the median CPU per request of each scenario, a bar per client
// count.
func (r *report) cpuSVG() ([]byte, error) {
	cs := cells(r.phases)
	p := plot.New()
	p.Title.Text, p.Y.Label.Text = "CPU per request (servers + PostgreSQL)", "µs per request"
	w := vg.Points(14)
	for i, c := range concurrencies {
		vals := make(plotter.Values, len(scenarios))
		for j, sc := range scenarios {
			if x := cs[sc][c]; x != nil && len(x.CPU) > 0 {
				vals[j] = median(x.CPU)
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bars.Color, bars.LineStyle.Width = plotutil.Color(i), 0
		bars.Offset = w * vg.Length(i-len(concurrencies)/2)
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("%d client%s", c, plural(c)), bars)
	}
	p.Legend.Top = true
	p.NominalX(scenarios...)
	p.X.Min, p.X.Max = -0.5, float64(len(scenarios))-0.5 // room for the outer bars
	c := vgsvg.New(10*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(c))
	return svgBytes(c)
}

func svgBytes(c *vgsvg.Canvas) ([]byte, error) {
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
