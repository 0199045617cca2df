package main

import (
	"github.com/sqlock/sqlock/internal/tools/contention"
	"github.com/sqlock/sqlock/internal/tools/plot"
)

// contentionPlot draws docs/contention.svg: throughput and p99 latency
// against the number of workers, one line per mode.
func contentionPlot(results []contention.Result, workers []int) string {
	series := func(val func(contention.Result) float64) []plot.Series {
		var all []plot.Series
		for _, m := range contention.Modes {
			s := plot.Series{Name: string(m)}
			for _, r := range results {
				if r.Mode == m {
					s.Points = append(s.Points, plot.Point{X: r.Workers, Y: val(r)})
				}
			}
			all = append(all, s)
		}
		return all
	}
	return plot.SVG("workers", workers,
		plot.Panel{Title: "throughput (increments/s)", Series: series(func(r contention.Result) float64 { return r.Throughput })},
		plot.Panel{Title: "p99 latency (ms, log scale)", LogY: true, Series: series(func(r contention.Result) float64 { return ms(r.P99) })})
}
