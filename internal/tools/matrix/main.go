// Command matrix renders the JSON that `make matrix` writes (one file per
// module, internal/testing/matrix's Report) as docs/matrix.md and one SVG
// plot per workload, docs/matrix-<workload>.svg:
//
//	go run ./internal/tools/matrix -in DIR -out docs
//
// Every figure comes from the JSON; nothing is typed by hand.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/tools/plot"
)

func main() {
	in := flag.String("in", "", "directory of the <module>.json files make matrix wrote")
	out := flag.String("out", "docs", "directory to write matrix.md and matrix-<workload>.svg to")
	command := flag.String("command", "", "the command that produced the JSON, for the header (default: make matrix with the reports' mode)")
	conditions := flag.String("conditions", "", "what else ran on the machine during the run, for the header (figures taken beside other work are not a quiet machine's)")
	flag.Parse()
	if *in == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/tools/matrix -in DIR [-out docs]")
		os.Exit(2)
	}
	reports, err := load(*in)
	if err == nil {
		err = write(*out, reports, *command, *conditions)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(1)
	}
}

// moduleOrder is the order modules are printed in; others follow by name.
var moduleOrder = []string{"sqlock", "redislock", "etcdlock", "dynamo"}

// load reads every DIR/*.json report, in moduleOrder.
func load(dir string) ([]matrix.Report, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.json report in %s", dir)
	}
	var reports []matrix.Report
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r matrix.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		reports = append(reports, r)
	}
	rank := func(m string) int {
		if i := slices.Index(moduleOrder, m); i >= 0 {
			return i
		}
		return len(moduleOrder)
	}
	sort.SliceStable(reports, func(i, j int) bool {
		a, b := reports[i], reports[j]
		if rank(a.Module) != rank(b.Module) {
			return rank(a.Module) < rank(b.Module)
		}
		return a.Module < b.Module
	})
	return reports, nil
}

// write renders reports into out: matrix.md and one SVG per workload.
func write(out string, reports []matrix.Report, command, conditions string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var cells []matrix.CellResult
	for _, r := range reports {
		cells = append(cells, r.Cells...)
	}
	for _, w := range matrix.Workloads {
		svg, ok := workloadPlot(cells, w)
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join(out, "matrix-"+string(w)+".svg"), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(out, "matrix.md"), []byte(markdown(reports, command, conditions)), 0o644)
}

// groupOrder is the order row groups are printed in.
var groupOrder = []string{"optimistic", "lock", "idempotency"}

func groupRank(g string) int {
	if i := slices.Index(groupOrder, g); i >= 0 {
		return i
	}
	return len(groupOrder)
}

// mechanisms lists the mechanisms of cells in print order: by group, then
// in the order the reports ran them.
func mechanisms(cells []matrix.CellResult) []matrix.CellResult {
	var first []matrix.CellResult
	seen := map[string]bool{}
	for _, c := range cells {
		if !seen[c.Mechanism] {
			seen[c.Mechanism] = true
			first = append(first, c)
		}
	}
	sort.SliceStable(first, func(i, j int) bool { return groupRank(first[i].Group) < groupRank(first[j].Group) })
	return first
}

// ratio is c's ops/s over the best of its group in the same cell.
func ratio(cells []matrix.CellResult, c matrix.CellResult) float64 {
	best := 0.0
	for _, o := range cells {
		if o.Group == c.Group && sameCell(o, c) {
			best = max(best, o.OpsPerSec)
		}
	}
	if best == 0 {
		return 0
	}
	return c.OpsPerSec / best
}

func sameCell(a, b matrix.CellResult) bool {
	return a.Workload == b.Workload && a.Keys == b.Keys && a.Net == b.Net && a.Contenders == b.Contenders
}

func find(cells []matrix.CellResult, mech string, w matrix.Workload, k matrix.Keys, n matrix.Net, contenders int) (matrix.CellResult, bool) {
	for _, c := range cells {
		if c.Mechanism == mech && c.Workload == w && c.Keys == k && c.Net == n && c.Contenders == contenders {
			return c, true
		}
	}
	return matrix.CellResult{}, false
}

// axes are the distinct contenders, keys and nets of cells, in order.
func axes(cells []matrix.CellResult) (contenders []int, keys []matrix.Keys, nets []matrix.Net) {
	for _, c := range cells {
		if !slices.Contains(contenders, c.Contenders) {
			contenders = append(contenders, c.Contenders)
		}
		if !slices.Contains(keys, c.Keys) {
			keys = append(keys, c.Keys)
		}
		if !slices.Contains(nets, c.Net) {
			nets = append(nets, c.Net)
		}
	}
	slices.Sort(contenders)
	slices.SortFunc(keys, func(a, b matrix.Keys) int { return strings.Compare(string(a), string(b)) })
	slices.SortFunc(nets, func(a, b matrix.Net) int { return strings.Compare(string(a), string(b)) })
	return contenders, keys, nets
}

func ofWorkload(cells []matrix.CellResult, w matrix.Workload) []matrix.CellResult {
	var out []matrix.CellResult
	for _, c := range cells {
		if c.Workload == w {
			out = append(out, c)
		}
	}
	return out
}

// plotKeys and plotNet are the cells a workload's plot draws: the hot key
// over loopback, where the mechanisms differ most.
const (
	plotKeys = matrix.HotKey
	plotNet  = matrix.Loopback
)

func workloadPlot(all []matrix.CellResult, w matrix.Workload) (string, bool) {
	cells := ofWorkload(all, w)
	if len(cells) == 0 {
		return "", false
	}
	contenders, _, _ := axes(cells)
	var tput, p99 []plot.Series
	for _, m := range mechanisms(cells) {
		t, p := plot.Series{Name: m.Mechanism}, plot.Series{Name: m.Mechanism}
		for _, n := range contenders {
			if c, ok := find(cells, m.Mechanism, w, plotKeys, plotNet, n); ok {
				t.Points = append(t.Points, plot.Point{X: n, Y: c.OpsPerSec})
				p.Points = append(p.Points, plot.Point{X: n, Y: c.P99Micros / 1000})
			}
		}
		tput, p99 = append(tput, t), append(p99, p)
	}
	return plot.SVG("contenders", contenders,
		plot.Panel{Title: fmt.Sprintf("%s: operations/s, one %s key, %s", w, plotKeys, plotNet), Series: tput},
		plot.Panel{Title: "p99 latency (ms, log scale)", LogY: true, Series: p99}), true
}

func markdown(reports []matrix.Report, command, conditions string) string {
	var b strings.Builder
	var cells []matrix.CellResult
	var faults []matrix.FaultResult
	modes := map[matrix.Mode]bool{}
	var started time.Time
	for _, r := range reports {
		cells = append(cells, r.Cells...)
		faults = append(faults, r.Faults...)
		modes[r.Mode] = true
		if started.IsZero() || r.Started.Before(started) {
			started = r.Started
		}
	}
	var modeNames []string
	for m := range modes {
		modeNames = append(modeNames, string(m))
	}
	slices.Sort(modeNames)
	mode := strings.Join(modeNames, "+")
	b.WriteString("# The decision table, measured\n\n")
	b.WriteString("<!-- Generated by `make matrix` (internal/tools/matrix): edit the harness or the rows, not this file. -->\n\n")
	if command == "" {
		command = "make matrix MATRIX=" + mode
	}
	fmt.Fprintf(&b, "- Command: `%s`\n", command)
	fmt.Fprintf(&b, "- Date: %s\n", started.UTC().Format("2006-01-02 15:04 UTC"))
	if conditions != "" {
		fmt.Fprintf(&b, "- Conditions: %s\n", conditions)
	}
	for _, r := range reports {
		fmt.Fprintf(&b, "- Module %s (MATRIX=%s, %s): %d load cells, %d faults, %.0f s on %s\n", r.Module, r.Mode,
			r.Started.UTC().Format("15:04 UTC"), len(r.Cells), len(r.Faults), r.Seconds, r.Machine)
	}
	var missing []string
	for _, m := range moduleOrder {
		if !slices.ContainsFunc(reports, func(r matrix.Report) bool { return r.Module == m }) {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(&b, "- **Not in this run**: module %s (no report in the input), so their rows are missing below\n", strings.Join(missing, ", "))
	}
	fmt.Fprintf(&b, "- Mode: %s", mode)
	if mode != string(matrix.Full) {
		b.WriteString(" — **not the full grid**: a reduced run, its figures short and noisy; `make matrix` (MATRIX=full) publishes the full one")
	}
	b.WriteString("\n\n")
	b.WriteString(`Every mechanism runs the demo's three workloads on PostgreSQL tables that have no unique
constraint (internal/testing/matrix), so a mechanism that lets two contenders through shows as
anomalies: **payment** (every contender receives the same orders; an order charged twice is an
anomaly), **seat** (every contender wants the same seats; a seat booked twice), **stock** (decrement
without going below zero; a negative quantity or a decrement the quantity does not show, a lost
update). On a **hot** key the contenders want the same orders or seats at the same time, or the one
product; on **many** keys each has its own. **loopback** reaches the server directly,
**proxy-0.5ms** through pgtest's proxy at 0.25 ms each way (a 0.5 ms round trip).

Each cell is "ops/s ×ratio · p99": operations completed per second (charged or correctly refused),
its ratio to the best row of its group (optimistic, lock, idempotency) in the same cell, and the
99th-percentile latency. Round trips per operation are counted on the wire (and, for Redis, etcd and
DynamoDB, one per request). An anomaly under no fault fails the run, so the anomaly column of a
published table is 0; errors are typed refusals (a retry policy that gave up, a lock wait that timed
out), counted, not hidden.

`)
	summary(&b, cells, faults)
	for _, w := range matrix.Workloads {
		wc := ofWorkload(cells, w)
		if len(wc) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## Load: %s\n\n![%s: throughput and p99 against contenders](matrix-%s.svg)\n\n", w, w, w)
		contenders, keys, nets := axes(wc)
		for _, n := range nets {
			for _, k := range keys {
				fmt.Fprintf(&b, "### %s, %s key%s, %s\n\n", w, k, plural(k), n)
				b.WriteString("| mechanism | group |")
				for _, c := range contenders {
					fmt.Fprintf(&b, " %d contender%s |", c, pluralN(c))
				}
				fmt.Fprintf(&b, " round trips/op (%s) | errors | anomalies |\n|---|---|", joinInts(contenders, " / "))
				for range contenders {
					b.WriteString("---:|")
				}
				b.WriteString("---:|---:|---:|\n")
				for _, m := range mechanisms(wc) {
					fmt.Fprintf(&b, "| %s | %s |", m.Mechanism, m.Group)
					var rts []string
					errs, anomalies := 0, 0
					for _, cn := range contenders {
						c, ok := find(wc, m.Mechanism, w, k, n, cn)
						if !ok {
							b.WriteString(" — |")
							continue
						}
						fmt.Fprintf(&b, " %s ×%.2f · %s ms |", plot.Num(c.OpsPerSec), ratio(wc, c), plot.Num(c.P99Micros/1000))
						rts = append(rts, fmt.Sprintf("%.1f", c.RoundTripsPerOp))
						errs += c.TypedErrors + c.OtherErrors
						anomalies += c.Anomalies
					}
					fmt.Fprintf(&b, " %s | %d | %d |\n", strings.Join(rts, " / "), errs, anomalies)
				}
				b.WriteString("\n")
			}
		}
	}
	faultTable(&b, faults)
	byHandNote(&b, cells)
	return b.String()
}

// anchor is the id of a mechanism's row in the summary table, which
// docs/guide.md's decision table links to: its name in lower case, every
// run of other characters a dash ("versioned+retry" → "versioned-retry").
func anchor(mechanism string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(mechanism) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}

// summary is one row per mechanism: where each stands on the hot key at
// the most contenders, over loopback, on each workload, and its faults'
// verdicts.
func summary(b *strings.Builder, cells []matrix.CellResult, faults []matrix.FaultResult) {
	contenders, _, _ := axes(cells)
	if len(contenders) == 0 {
		return
	}
	top := contenders[len(contenders)-1]
	fmt.Fprintf(b, "## Summary\n\nOne row per mechanism: ops/s ×ratio to its group's best on the hot key with %d contenders over loopback, per workload, and the verdict of each fault it was run under. The tables below have every cell.\n\n", top)
	b.WriteString("| mechanism | group |")
	for _, w := range matrix.Workloads {
		fmt.Fprintf(b, " %s |", w)
	}
	b.WriteString(" faults |\n|---|---|")
	for range matrix.Workloads {
		b.WriteString("---:|")
	}
	b.WriteString("---|\n")
	listed := map[string]bool{}
	row := func(mech, group string) {
		listed[mech] = true
		fmt.Fprintf(b, `| <a id="%s"></a>%s | %s |`, anchor(mech), mech, group)
		for _, w := range matrix.Workloads {
			if c, ok := find(cells, mech, w, matrix.HotKey, matrix.Loopback, top); ok {
				fmt.Fprintf(b, " %s ×%.2f |", plot.Num(c.OpsPerSec), ratio(cells, c))
			} else {
				b.WriteString(" — |")
			}
		}
		var vs []string
		for _, f := range faults {
			if f.Mechanism == mech {
				vs = append(vs, fmt.Sprintf("%s: **%s**", f.Fault, f.Verdict))
			}
		}
		fmt.Fprintf(b, " %s |\n", strings.Join(vs, "; "))
	}
	for _, m := range mechanisms(cells) {
		row(m.Mechanism, m.Group)
	}
	for _, f := range faults { // fault-only rows
		if !listed[f.Mechanism] {
			row(f.Mechanism, f.Group)
		}
	}
	b.WriteString("\n")
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, sep)
}

func plural(k matrix.Keys) string {
	if k == matrix.ManyKeys {
		return "s"
	}
	return ""
}

func pluralN(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func faultTable(b *strings.Builder, faults []matrix.FaultResult) {
	b.WriteString("## Faults\n\n")
	if len(faults) == 0 {
		b.WriteString("No fault was run.\n\n")
		return
	}
	b.WriteString(`Each fault runs a workload with the fault injected and checks the workload's invariant (and,
where a row says so, a porcupine history or a fenced register): **safe** — no anomaly over the
operations run; **unavailable** — errors and no anomaly, the time from the first failed operation to
the next that succeeded; **unsafe** — anomalies, one printed below. "promised" is the verdict the
row's documentation promises, which the run asserts; "not asserted" marks a fault whose outcome is
not structurally guaranteed, recorded as measured.

| mechanism | fault | workload | verdict | promised | ops | anomalies | errors | unavailable | duration |
|---|---|---|---|---|---:|---:|---:|---:|---:|
`)
	sorted := slices.Clone(faults)
	sort.SliceStable(sorted, func(i, j int) bool { return groupRank(sorted[i].Group) < groupRank(sorted[j].Group) })
	for _, f := range sorted {
		promised := string(f.Expect)
		if promised == "" {
			promised = "not asserted"
		}
		fmt.Fprintf(b, "| %s | %s | %s | **%s** | %s | %d | %d | %d | %.2f s | %.1f s |\n", f.Mechanism, f.Fault, f.Workload,
			f.Verdict, promised, f.Ops, f.Anomalies, f.TypedErrors+f.OtherErrors, f.UnavailableSeconds, f.Seconds)
	}
	b.WriteString("\n")
	for _, f := range sorted {
		var lines []string
		if f.Example != "" {
			lines = append(lines, "anomaly: "+f.Example)
		}
		if f.ErrorExample != "" {
			lines = append(lines, "error: "+f.ErrorExample)
		}
		lines = append(lines, f.Notes...)
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(b, "- **%s, %s** (%s):", f.Mechanism, f.Fault, f.Verdict)
		for _, l := range lines {
			fmt.Fprintf(b, " %s.", strings.TrimSuffix(l, "."))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// byHandNote compares each library row with its group's hand-written
// baseline, cell by cell, and prints where the library is slower.
func byHandNote(b *strings.Builder, cells []matrix.CellResult) {
	b.WriteString("## Against the same mechanism written by hand\n\n")
	b.WriteString(`Each group has its mechanism written by hand ("by hand: …"). For every library row, the median
over the cells of its ops/s ratio to that baseline, and the round trips per operation of both (the
first cell with one contender, where no contention adds retries). Where the ratio is under 1, the
round trips say whether the cost is on the wire or in the client.

The lock group's baseline is the transaction lock by hand: a session lock and a lease do more by
design (a lock that outlives a transaction, a loss watch, a row with an expiry and a token), and
their ratio says what that costs here.

| mechanism | baseline | median ratio to baseline | worst cell | round trips/op (row / baseline) | where the difference is |
|---|---|---:|---|---:|---|
`)
	var targets []string
	for _, m := range mechanisms(cells) {
		if strings.HasPrefix(m.Mechanism, "by hand") {
			continue
		}
		base := ""
		for _, o := range mechanisms(cells) {
			if o.Group == m.Group && strings.HasPrefix(o.Mechanism, "by hand") {
				base = o.Mechanism
			}
		}
		if base == "" {
			continue
		}
		var ratios []float64
		worst, worstAt := 0.0, ""
		var rt, baseRT float64
		haveRT := false
		for _, c := range cells {
			if c.Mechanism != m.Mechanism {
				continue
			}
			bc, ok := find(cells, base, c.Workload, c.Keys, c.Net, c.Contenders)
			if !ok || bc.OpsPerSec == 0 {
				continue
			}
			r := c.OpsPerSec / bc.OpsPerSec
			ratios = append(ratios, r)
			if worstAt == "" || r < worst {
				worst, worstAt = r, fmt.Sprintf("%.2f (%s, %s, %d, %s)", r, c.Workload, c.Keys, c.Contenders, c.Net)
			}
			if !haveRT && c.Contenders == 1 || !haveRT && c.Contenders == minContenders(cells) {
				rt, baseRT, haveRT = c.RoundTripsPerOp, bc.RoundTripsPerOp, true
			}
		}
		if len(ratios) == 0 {
			continue
		}
		slices.Sort(ratios)
		median := ratios[len(ratios)/2]
		why := "on par (within 5%)"
		switch {
		case median > 1.05 && rt < baseRT-0.05:
			why = fmt.Sprintf("faster: %.1f fewer round trips per operation", baseRT-rt)
		case median > 1.05 && rt > baseRT+0.05:
			why = fmt.Sprintf("faster, with %.1f more round trips per operation", rt-baseRT)
		case median > 1.05:
			why = "faster, in as many round trips"
		case median >= 0.95:
		case rt > baseRT+0.05:
			why = fmt.Sprintf("%.1f more round trips per operation", rt-baseRT)
		default:
			why = "no more round trips: the time is in waiting (queue, retries, wake-ups) or in the client"
		}
		fmt.Fprintf(b, "| %s | %s | %.2f | %s | %.1f / %.1f | %s |\n", m.Mechanism, base, median, worstAt, rt, baseRT, why)
		if m.Mechanism == "idem" {
			met := "met"
			if median < 0.95 || rt > baseRT+0.05 {
				met = "not met"
			}
			targets = append(targets, fmt.Sprintf("idem's target, at least 0.95 of the claim row written by hand with no more round trips: %s (median %.2f, %.1f round trips against %.1f).", met, median, rt, baseRT))
		}
	}
	b.WriteString("\n")
	for _, t := range targets {
		b.WriteString(t + "\n\n")
	}
}

func minContenders(cells []matrix.CellResult) int {
	m := 0
	for _, c := range cells {
		if m == 0 || c.Contenders < m {
			m = c.Contenders
		}
	}
	return m
}
