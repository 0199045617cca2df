package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sqlock/sqlock/internal/tools/contention"
)

// medians folds the rounds of the contention sweep into one result per
// mode and worker count: the median throughput and the median p99.
func medians(all []contention.Result) []contention.Result {
	type point struct {
		m contention.Mode
		w int
	}
	var order []point
	groups := map[point][]contention.Result{}
	for _, r := range all {
		p := point{r.Mode, r.Workers}
		if groups[p] == nil {
			order = append(order, p)
		}
		groups[p] = append(groups[p], r)
	}
	out := make([]contention.Result, 0, len(order))
	for _, p := range order {
		rs := groups[p]
		m := rs[0]
		m.Throughput = median(rs, func(r contention.Result) float64 { return r.Throughput })
		m.P99 = time.Duration(median(rs, func(r contention.Result) float64 { return float64(r.P99) }))
		m.P50 = time.Duration(median(rs, func(r contention.Result) float64 { return float64(r.P50) }))
		m.Latencies = nil
		out = append(out, m)
	}
	return out
}

func median(rs []contention.Result, f func(contention.Result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// hybridMarkdown is the section on txlock.DoOptimistic (issue #19, part 3):
// per worker count and round, its throughput against the better of
// optimistic+retry and txlock, and its p99 against txlock's, each ratio
// between runs of the same round (measured one after the other), with the
// median and the spread over the rounds.
func hybridMarkdown(all []contention.Result, workers []int, rounds int, load string) string {
	type key struct {
		m        contention.Mode
		w, round int
	}
	at := map[key]contention.Result{}
	seen := map[[2]any]int{}
	for _, r := range all {
		k := [2]any{r.Mode, r.Workers}
		at[key{r.Mode, r.Workers, seen[k]}] = r
		seen[k]++
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("\n### Optimistic writes that queue when the key turns hot\n\n")
	w("`%s` is `txlock.DoOptimistic`: the same re-reading, version-guarded increment as optimistic+retry, ", contention.Hybrid)
	w("whose first attempt runs lock-free on the `*sql.DB`, whose retries after a conflict run in a transaction ")
	w("holding the key's advisory lock (folded into BEGIN), and whose new calls queue at once while one of the ")
	w("callers sharing the run's `txlock.HotKeys` is queued on the key, or four run lock-free on it. Targets (#19): throughput ≥ the better of optimistic+retry and ")
	w("txlock at every point, p99 at 32 and 64 workers ≤ 1.2× txlock's. Each ratio is taken within one round ")
	w("(the modes of a point run one after the other); %d rounds, median and [min–max]. ", rounds)
	w("Load on the machine (%d CPUs; the sweep's own workers and backends count in it): %s.\n\n", runtime.NumCPU(), load)
	w("| workers | tx/s ÷ best of optimistic, txlock | p99 ÷ txlock's p99 | locked attempts per increment |\n|---|---|---|---|\n")
	for _, n := range workers {
		var tput, tail, free []float64
		for round := range rounds {
			h, okH := at[key{contention.Hybrid, n, round}]
			o, okO := at[key{contention.Optimistic, n, round}]
			x, okX := at[key{contention.TxLock, n, round}]
			if !okH || !okO || !okX {
				continue
			}
			tput = append(tput, h.Throughput/max(o.Throughput, x.Throughput))
			tail = append(tail, float64(h.P99)/float64(x.P99))
			free = append(free, float64(h.Locked)/float64(max(h.Successes, 1)))
		}
		if len(tput) == 0 {
			continue
		}
		w("| %d | **%.2f** [%s] | **%.2f** [%s] | %.2f |\n", n, med(tput), spread(tput, 2), med(tail), spread(tail, 2), med(free))
	}
	w("\n")
	return b.String()
}

func med(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
