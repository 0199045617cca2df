// Package plot draws the repository's SVG figures: two panels side by
// side (throughput and p99 latency, say) against a count on a log2 axis,
// one line per series, the legend below. docs/contention.svg
// (internal/tools/benchreport) and docs/matrix-<workload>.svg
// (internal/tools/matrix) are drawn by it.
package plot

import (
	"fmt"
	"math"
	"strings"
)

// Colors are the series' colours, in order; series beyond them reuse them
// dashed.
var Colors = []string{"#444444", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

// Point is one measurement: Y at X.
type Point struct {
	X int
	Y float64
}

// Series is one line.
type Series struct {
	Name   string
	Points []Point
}

// Panel is one of the figure's panels.
type Panel struct {
	Title string
	// LogY draws the y axis on a log10 scale.
	LogY   bool
	Series []Series
}

// SVG draws panels side by side against xs (positive, ascending; a log2
// axis named xLabel), with a legend of the first panel's series names. A
// series is drawn in the same colour and dash in every panel.
func SVG(xLabel string, xs []int, panels ...Panel) string {
	const w, h, pad, legendW = 460, 300, 55, 175
	perRow := max(1, (len(panels)*w-40)/legendW)
	var names []string
	if len(panels) > 0 {
		for _, s := range panels[0].Series {
			names = append(names, s.Name)
		}
	}
	rows := (len(names) + perRow - 1) / perRow
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n",
		len(panels)*w, h+20+20*rows)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, p := range panels {
		panel(&b, i*w, w, h, pad, xLabel, xs, p)
	}
	for i, name := range names {
		x, y := 60+(i%perRow)*legendW, h+25+20*(i/perRow)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`+"\n", x, y, x+24, y, color(i), dash(i))
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x+30, y+4, Esc(name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func color(i int) string { return Colors[i%len(Colors)] }

func dash(i int) string {
	if i >= len(Colors) {
		return ` stroke-dasharray="6,3"`
	}
	return ""
}

func panel(b *strings.Builder, x0, w, h, pad int, xLabel string, xs []int, p Panel) {
	lo, hi := math.Inf(1), 0.0
	for _, s := range p.Series {
		for _, pt := range s.Points {
			lo, hi = math.Min(lo, pt.Y), math.Max(hi, pt.Y)
		}
	}
	if math.IsInf(lo, 1) {
		lo = 0
	}
	logY := p.LogY
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
	minX, maxX := 0.0, 1.0
	if len(xs) > 0 {
		minX, maxX = math.Log2(float64(xs[0])), math.Log2(float64(xs[len(xs)-1]))
	}
	if maxX == minX {
		maxX++
	}
	x := func(n int) float64 {
		return float64(x0+pad) + (math.Log2(float64(n))-minX)/(maxX-minX)*float64(w-pad-20)
	}
	fmt.Fprintf(b, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`+"\n", x0+pad, Esc(p.Title))
	fmt.Fprintf(b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="black"/>`+"\n", x0+pad, y(lo0(lo, logY)), x0+w-20, y(lo0(lo, logY)))
	fmt.Fprintf(b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="black"/>`+"\n", x0+pad, y(lo0(lo, logY)), x0+pad, y(hi0(hi, logY)))
	for _, n := range xs {
		fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle">%d</text>`+"\n", x(n), h-pad+26, n)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+w/2, h-pad+40, Esc(xLabel))
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
		fmt.Fprintf(b, `<text x="%d" y="%.0f" text-anchor="end">%s</text>`+"\n", x0+pad-4, y(v)+4, Num(label))
		fmt.Fprintf(b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#e0e0e0"/>`+"\n", x0+pad, y(v), x0+w-20, y(v))
	}
	for i, s := range p.Series {
		var pts []string
		for _, n := range xs {
			for _, pt := range s.Points {
				if pt.X == n {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(n), y(pt.Y)))
				}
			}
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", color(i), dash(i), strings.Join(pts, " "))
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

// Num prints v with as many digits as a table or an axis needs: none from
// 100 (or for an integer), two from 1, three below.
func Num(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// Esc escapes s for SVG text.
func Esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
