package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/sqlock/sqlock/internal/tools/contention"
)

var colors = []string{"#444444", "#1f77b4", "#2ca02c", "#d62728", "#9467bd"}

// plot draws two panels: throughput and p99 latency against the number of
// workers (log2 x axis), one line per mode.
func plot(results []contention.Result, workers []int) string {
	const w, h, pad = 460, 300, 55
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", 2*w, h+40)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	panel(&b, 0, w, h, pad, "throughput (increments/s)", workers, results, false,
		func(r contention.Result) float64 { return r.Throughput })
	panel(&b, w, w, h, pad, "p99 latency (ms, log scale)", workers, results, true,
		func(r contention.Result) float64 { return ms(r.P99) })
	for i, m := range contention.Modes {
		x := 60 + i*175
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"/>`+"\n", x, h+25, x+24, h+25, colors[i])
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x+30, h+29, esc(string(m)))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func panel(b *strings.Builder, x0, w, h, pad int, title string, workers []int, results []contention.Result,
	logY bool, val func(contention.Result) float64) {
	lo, hi := math.Inf(1), 0.0
	for _, r := range results {
		v := val(r)
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if logY {
		lo, hi = math.Floor(math.Log10(math.Max(lo, 0.01))), math.Ceil(math.Log10(math.Max(hi, 0.1)))
		if hi == lo {
			hi++
		}
	} else {
		lo, hi = 0, niceCeil(hi)
	}
	y := func(v float64) float64 {
		if logY {
			v = math.Log10(math.Max(v, 0.01))
		}
		return float64(h-pad) - (v-lo)/(hi-lo)*float64(h-2*pad) + 10
	}
	minW, maxW := math.Log2(float64(workers[0])), math.Log2(float64(workers[len(workers)-1]))
	if maxW == minW {
		maxW++
	}
	x := func(n int) float64 {
		return float64(x0+pad) + (math.Log2(float64(n))-minW)/(maxW-minW)*float64(w-pad-20)
	}
	fmt.Fprintf(b, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`+"\n", x0+pad, esc(title))
	fmt.Fprintf(b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="black"/>`+"\n", x0+pad, y(lo0(lo, logY)), x0+w-20, y(lo0(lo, logY)))
	fmt.Fprintf(b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="black"/>`+"\n", x0+pad, y(lo0(lo, logY)), x0+pad, y(hi0(hi, logY)))
	for _, n := range workers {
		fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle">%d</text>`+"\n", x(n), h-pad+26, n)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">workers</text>`+"\n", x0+w/2, h-pad+40)
	for i := 0; i <= 4; i++ {
		var v, label float64
		if logY {
			v = lo + (hi-lo)*float64(i)/4
			label = math.Pow(10, v)
			v = label
		} else {
			v = hi * float64(i) / 4
			label = v
		}
		fmt.Fprintf(b, `<text x="%d" y="%.0f" text-anchor="end">%s</text>`+"\n", x0+pad-4, y(v)+4, num(label))
		fmt.Fprintf(b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#e0e0e0"/>`+"\n", x0+pad, y(v), x0+w-20, y(v))
	}
	for i, m := range contention.Modes {
		var pts []string
		for _, n := range workers {
			for _, r := range results {
				if r.Mode == m && r.Workers == n {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(n), y(val(r))))
				}
			}
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colors[i], strings.Join(pts, " "))
	}
}

func lo0(lo float64, logY bool) float64 {
	if logY {
		return math.Pow(10, lo)
	}
	return lo
}

func hi0(hi float64, logY bool) float64 {
	if logY {
		return math.Pow(10, hi)
	}
	return hi
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
