package matrix

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// grid is the load cells of a mode.
type grid struct {
	contenders []int
	keys       []Keys
	nets       []Net
	duration   time.Duration // each cell's load phase; 0: until every contender has done perContender
	// perContender bounds each contender's operations (and so the keys a
	// payment or seat state needs).
	perContender int
}

func gridOf(m Mode) grid {
	switch m {
	case Full:
		return grid{[]int{1, 8, 32, 64}, []Keys{HotKey, ManyKeys}, []Net{Loopback, Proxy}, time.Second, 2000}
	}
	return grid{[]int{4}, []Keys{HotKey, ManyKeys}, []Net{Loopback, Proxy}, 0, 6}
}

// Contenders returns the contender counts of m's grid, for a plot's axis.
func Contenders(m Mode) []int { return slices.Clone(gridOf(m).contenders) }

// keysFor is how many items a cell's State needs so that no contender runs
// out of keys in perContender operations.
func keysFor(w Workload, k Keys, contenders, perContender int) int {
	switch {
	case w == Stock && k == HotKey:
		return 1
	case w == Stock:
		return contenders
	case k == HotKey:
		return perContender
	}
	return contenders * perContender
}

// KeyOf is the key contender i (0-based) uses for its j-th operation on
// c: for payment and seat, on a hot key every contender walks the same
// keys in the same order (they all want order k0, then k1, …), on many
// keys each its own; for stock one key for all, or one each.
func KeyOf(c *Cell, i, j int) string {
	n := c.State.Keys()
	switch {
	case c.Workload == Stock && c.Keys == HotKey:
		return c.State.Key(0)
	case c.Workload == Stock:
		return c.State.Key(i % n)
	case c.Keys == HotKey:
		return c.State.Key(j % n)
	}
	per := max(n/max(c.Contenders, 1), 1)
	return c.State.Key((i*per + j%per) % n)
}

// env is what a Run's cells share: the database and the proxy to it.
type env struct {
	t     *testing.T
	pg    *pgtest.DB
	proxy *pgtest.Proxy
}

func (e *env) dsn(n Net) string {
	if n == Proxy {
		if e.proxy == nil {
			e.proxy = pgtest.StartSlowProxy(e.t, e.pg.DSN, 250*time.Microsecond)
		}
		return e.proxy.DSN
	}
	return e.pg.DSN
}

// newCell opens a counting handle on dsn and a fresh State on it.
func newCell(ctx context.Context, t testing.TB, dsn string, n Net, w Workload, contenders int, k Keys, nkeys int, opts []StateOption) (*Cell, error) {
	if contenders < 1 {
		return nil, fmt.Errorf("matrix: %d contenders", contenders)
	}
	rt := &RoundTrips{}
	db, err := OpenSQL(dsn, rt)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(2*contenders + 4)
	db.SetMaxIdleConns(2*contenders + 4)
	st, err := NewState(ctx, db, w, nkeys, opts...)
	if err == nil {
		err = Warm(ctx, db, contenders)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Cell{Workload: w, Contenders: contenders, Keys: k, Net: n, State: st, DB: db, DSN: dsn,
		Dial: rt.Dial, RoundTrips: rt, T: t}, nil
}

// closeCell drops the cell's state and closes its handle; the store may be
// gone after a fault, so errors are logged only.
func closeCell(t testing.TB, c *Cell) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.State.Drop(ctx); err != nil {
		t.Logf("matrix: drop %s: %v", c.State.Schema, err)
	}
	c.DB.Close()
}

// Run runs every row's load cells on the grid of ModeFromEnv, then every
// row's faults, as subtests of t named mechanism/workload/keys/contenders/net
// and mechanism/fault/name. It fails t when a load cell has an anomaly or
// an error that is not typed, or a fault's verdict differs from its Expect.
// With MATRIX_OUT set it writes $MATRIX_OUT/<module>.json.
func Run(t *testing.T, rows ...Row) {
	t.Helper()
	mode, err := ModeFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Module: moduleName(), Mode: mode, Started: time.Now().UTC(), Machine: machine()}
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Mechanism == "" || seen[r.Mechanism] || (r.Open == nil && (len(r.Workloads) > 0 || len(r.Faults) > 0)) {
			t.Fatalf("matrix: row %q: a row needs a unique Mechanism and an Open", r.Mechanism)
		}
		seen[r.Mechanism] = true
		for _, w := range r.Workloads {
			if !slices.Contains(Workloads, w) {
				t.Fatalf("matrix: row %q: unknown workload %q", r.Mechanism, w)
			}
		}
	}
	e := &env{t: t, pg: pgtest.New(t)}
	g := gridOf(mode)
	// Cell by cell, every row of a cell one after the other: a row's ratio
	// is to the best row of its cell, and rows run seconds apart see the
	// same machine, where rows run minutes apart would not (a shared
	// machine's speed drifts by more than the differences measured).
	for _, w := range Workloads {
		for _, n := range g.nets {
			for _, k := range g.keys {
				for _, c := range g.contenders {
					for i := range rows {
						row := &rows[i]
						if !slices.Contains(row.Workloads, w) {
							continue
						}
						name := fmt.Sprintf("%s/%s/%s/%d/%s", row.Mechanism, w, k, c, n)
						t.Run(name, func(t *testing.T) {
							res := runCell(t, e.dsn(n), row, w, c, k, n, g)
							rep.Cells = append(rep.Cells, res)
						})
					}
				}
			}
		}
	}
	for i := range rows {
		row := &rows[i]
		for j := range row.Faults {
			ft := &row.Faults[j]
			t.Run(row.Mechanism+"/fault/"+ft.Name, func(t *testing.T) {
				if res, ok := runFault(t, row, ft, mode); ok {
					rep.Faults = append(rep.Faults, res)
				}
			})
		}
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	if dir := os.Getenv("MATRIX_OUT"); dir != "" {
		if err := rep.write(dir); err != nil {
			t.Errorf("matrix: %v", err)
		}
	}
}

// testContext ends with the test, or shortly before its deadline, so that
// no operation of a row can wait for ever: a wait ends in a typed error
// that the cell counts, and the cell reports it.
func testContext(t *testing.T) (context.Context, context.CancelFunc) {
	if d, ok := t.Deadline(); ok {
		return context.WithDeadline(t.Context(), d.Add(-30*time.Second))
	}
	return context.WithCancel(t.Context())
}

func runCell(t *testing.T, dsn string, row *Row, w Workload, contenders int, k Keys, n Net, g grid) CellResult {
	ctx, cancel := testContext(t)
	defer cancel()
	opts := []StateOption{WithStock(int64(keysStock(k, contenders, g.perContender)))}
	c, err := newCell(ctx, t, dsn, n, w, contenders, k, keysFor(w, k, contenders, g.perContender), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer closeCell(t, c)
	actors, closeFn, err := row.Open(ctx, c)
	if err != nil {
		t.Fatalf("%s: open: %v", row.Mechanism, err)
	}
	if len(actors) != contenders {
		t.Fatalf("%s opened %d actors for %d contenders", row.Mechanism, len(actors), contenders)
	}
	type tally struct {
		lat                         []time.Duration
		done, refused, typed, other int
		errExample                  string
	}
	tallies := make([]tally, contenders)
	rt0 := c.RoundTrips.Load()
	start := time.Now()
	var wg sync.WaitGroup
	for i, a := range actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tl := &tallies[i]
			tl.lat = make([]time.Duration, 0, g.perContender)
			for j := 0; j < g.perContender && ctx.Err() == nil; j++ {
				if g.duration > 0 && time.Since(start) >= g.duration {
					return
				}
				t0 := time.Now()
				r, err := a.Op(ctx, KeyOf(c, i, j))
				d := time.Since(t0)
				switch {
				case err != nil && Typed(err):
					tl.typed++
				case err != nil:
					tl.other++
				case r == Refused:
					tl.refused++
				default:
					tl.done++
				}
				if err != nil {
					if tl.errExample == "" {
						tl.errExample = err.Error()
					}
					continue
				}
				tl.lat = append(tl.lat, d)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rts := c.RoundTrips.Load() - rt0
	if closeFn != nil {
		closeFn()
	}
	res := CellResult{Mechanism: row.Mechanism, Group: row.Group, Workload: w, Contenders: contenders, Keys: k, Net: n,
		Seconds: elapsed.Seconds()}
	var lat []time.Duration
	for _, tl := range tallies {
		lat = append(lat, tl.lat...)
		res.Done += tl.done
		res.Refused += tl.refused
		res.TypedErrors += tl.typed
		res.OtherErrors += tl.other
		if res.ErrorExample == "" {
			res.ErrorExample = tl.errExample
		}
	}
	res.Ops = res.Done + res.Refused
	if attempts := res.Ops + res.TypedErrors + res.OtherErrors; attempts > 0 {
		res.RoundTripsPerOp = float64(rts) / float64(attempts)
	}
	if elapsed > 0 {
		res.OpsPerSec = float64(res.Ops) / elapsed.Seconds()
	}
	slices.Sort(lat)
	res.P50Micros, res.P99Micros = micros(percentile(lat, 0.50)), micros(percentile(lat, 0.99))
	res.Anomalies, res.Example, err = checkCell(ctx, row, c)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case res.Anomalies > 0:
		t.Errorf("%s on %s: %d anomalies under no fault, e.g. %s", row.Mechanism, w, res.Anomalies, res.Example)
	case res.OtherErrors > 0:
		t.Errorf("%s on %s: %d errors that match no sentinel, e.g. %s", row.Mechanism, w, res.OtherErrors, res.ErrorExample)
	case res.Ops == 0:
		t.Errorf("%s on %s: no operation completed (%d typed errors, e.g. %s)", row.Mechanism, w, res.TypedErrors, res.ErrorExample)
	}
	t.Logf("%s %s %s×%d %s: %d ops (%d done), %.0f ops/s, p50 %.0fµs, p99 %.0fµs, %.2f round trips/op",
		row.Mechanism, w, k, contenders, n, res.Ops, res.Done, res.OpsPerSec, res.P50Micros, res.P99Micros, res.RoundTripsPerOp)
	return res
}

// keysStock is the stock of each item: half of what the contenders sharing
// it could take, so that a cell run to the end also sells out.
func keysStock(k Keys, contenders, perContender int) int {
	if k == HotKey {
		return max(contenders*perContender/2, 1)
	}
	return max(perContender/2, 1)
}

func runFault(t *testing.T, row *Row, ft *Fault, mode Mode) (FaultResult, bool) {
	if ft.Run == nil || ft.Name == "" {
		t.Fatalf("%s: a fault needs a Name and a Run", row.Mechanism)
	}
	switch ft.Expect {
	case "", Safe, Unavailable, Unsafe:
	default:
		t.Fatalf("%s/%s: unknown verdict %q", row.Mechanism, ft.Name, ft.Expect)
	}
	w := ft.Workload
	if w == "" {
		w = Payment
		if len(row.Workloads) > 0 {
			w = row.Workloads[0]
		}
	}
	ctx, cancel := testContext(t)
	defer cancel()
	f := &FaultRun{T: t, Row: row, Fault: ft, Workload: w, Mode: mode, start: time.Now()}
	f.newCell = func(ctx context.Context, dsn string, contenders int, k Keys, nkeys int, opts []StateOption) (*Cell, error) {
		return newCell(ctx, t, dsn, "fault", w, contenders, k, nkeys, opts)
	}
	defer func() {
		for _, c := range f.cells {
			closeCell(t, c)
		}
	}()
	if err := ft.Run(ctx, f); err != nil {
		f.finish(ctx)
		t.Fatalf("%s/%s: the fault could not be run: %v", row.Mechanism, ft.Name, err)
	}
	res, err := f.finish(ctx)
	if err != nil {
		t.Fatalf("%s/%s: check: %v", row.Mechanism, ft.Name, err)
	}
	if res.Ops == 0 && res.TypedErrors+res.OtherErrors == 0 {
		t.Errorf("%s/%s: no operation ran", row.Mechanism, ft.Name)
	}
	if ft.Expect != "" && res.Verdict != ft.Expect {
		t.Errorf("%s/%s: verdict %s, the row promises %s (%d ops, %d anomalies %q, %d typed / %d other errors %q)",
			row.Mechanism, ft.Name, res.Verdict, ft.Expect, res.Ops, res.Anomalies, res.Example,
			res.TypedErrors, res.OtherErrors, res.ErrorExample)
	}
	t.Logf("%s/%s: %s — %d ops, %d anomalies, %d typed + %d other errors, unavailable %.2fs",
		row.Mechanism, ft.Name, res.Verdict, res.Ops, res.Anomalies, res.TypedErrors, res.OtherErrors, res.UnavailableSeconds)
	return res, true
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
