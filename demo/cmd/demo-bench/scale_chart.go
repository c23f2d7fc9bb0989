package main

import (
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// sizeChart is the scale report's chart, written next to it.
const sizeChart = "scale-size.svg"

// writeCharts writes the scale report's chart into dir (none without a
// churn).
func (r *scaleReport) writeCharts(dir string) error {
	if len(r.churns) == 0 {
		return nil
	}
	return writeSVGs(dir, map[string]func() ([]byte, error){sizeChart: r.sizeSVG})
}

// sizeSVG is two panels over the churn's time: the table's and its
// indexes' size, and the live keys and dead tuples, a line each per
// variant.
func (r *scaleReport) sizeSVG() ([]byte, error) {
	size, rows := overTime("table and indexes", "MiB"), overTime("live keys and dead tuples", "rows")
	line := func(p *plot.Plot, i int, name string, xys plotter.XYs, dashed bool) error {
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	for i, ch := range r.churns {
		var heap, idx, live, dead plotter.XYs
		for _, s := range ch.samples {
			t := s.at.Seconds()
			heap = append(heap, plotter.XY{X: t, Y: float64(s.heap) / (1 << 20)})
			idx = append(idx, plotter.XY{X: t, Y: float64(s.indexes) / (1 << 20)})
			live = append(live, plotter.XY{X: t, Y: float64(s.keys)})
			dead = append(dead, plotter.XY{X: t, Y: float64(s.dead)})
		}
		for _, l := range []struct {
			p      *plot.Plot
			name   string
			xys    plotter.XYs
			dashed bool
		}{{size, "table, " + ch.variant, heap, false}, {size, "indexes, " + ch.variant, idx, true},
			{rows, "live keys, " + ch.variant, live, false}, {rows, "dead tuples, " + ch.variant, dead, true}} {
			if len(l.xys) == 0 {
				continue
			}
			if err := line(l.p, i, l.name, l.xys, l.dashed); err != nil {
				return nil, err
			}
		}
	}
	return sideBySide(size, rows)
}

// overTime is an empty plot over the churn's seconds.
func overTime(title, y string) *plot.Plot {
	p := emptyPlot(title, "seconds of churn", y)
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.YOffs = vg.Centimeter / 2
	return p
}
