package matrix

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/retry"
)

// Verdict is a fault run's class.
type Verdict string

const (
	Safe        Verdict = "safe"        // no anomaly over the operations run
	Unavailable Verdict = "unavailable" // errors, no anomaly: the mechanism said no instead of being wrong
	Unsafe      Verdict = "unsafe"      // anomalies: the workload's invariant broke
)

// Fault is one fault injected around a row's operations.
type Fault struct {
	// Name is the issue's name of the fault: "holder paused past TTL
	// (fenced)", "holder paused past TTL (unfenced)", "holder's connection
	// cut", "store killed", "failover sync", "failover async", "restart
	// without persistence", "primary failover", "primary failover +
	// replica wait", "etcd leader killed", "etcd quorum lost",
	// "partitioned by proxy", "PgBouncer (transaction mode)".
	Name string
	// Workload is the workload the fault runs (default the row's first,
	// or Payment).
	Workload Workload
	// Expect is the verdict the row's documentation promises: the test
	// fails when the run's differs. Empty records the verdict without
	// asserting it, for a fault whose outcome is not structurally
	// guaranteed (docs/matrix.md says so).
	Expect Verdict
	// Run injects the fault around operations it drives through f
	// (NewCell, Actors, Do or Load). An error fails the test: it means the
	// fault could not be made, not that the mechanism failed.
	Run func(ctx context.Context, f *FaultRun) error
}

// FaultRun records one fault run: operations, errors, unavailability
// windows and anomalies (every State made by NewCell is checked at the end,
// and Anomaly adds those a history checker such as porcupine finds), and
// derives the Verdict.
type FaultRun struct {
	T        testing.TB
	Row      *Row
	Fault    *Fault
	Workload Workload
	Mode     Mode

	mu                 sync.Mutex
	ops, done, refused int
	typed, other       int
	errExample         string
	failingSince       time.Time // zero while the last operation succeeded
	unavailable        time.Duration
	anomalies          int
	example            string
	notes              []string
	cells              []*Cell
	closers            []func()
	newCell            func(ctx context.Context, dsn string, contenders int, keys Keys, nkeys int, opts []StateOption) (*Cell, error)
	start              time.Time
}

// NewCell makes a cell of the fault's workload on the database dsn names
// (the fault's own server, a proxy it can cut, PgBouncer): a counting
// *sql.DB with room for contenders, and a fresh State of nkeys items (for
// keys, see Load), checked when the fault ends.
func (f *FaultRun) NewCell(ctx context.Context, dsn string, contenders int, keys Keys, nkeys int, opts ...StateOption) (*Cell, error) {
	c, err := f.newCell(ctx, dsn, contenders, keys, nkeys, opts)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.cells = append(f.cells, c)
	f.mu.Unlock()
	return c, nil
}

// Actors opens the row's actors on c (Row.Open); they are released when
// the fault ends.
func (f *FaultRun) Actors(ctx context.Context, c *Cell) ([]Actor, error) {
	actors, closeFn, err := f.Row.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	if closeFn != nil {
		f.mu.Lock()
		f.closers = append(f.closers, closeFn)
		f.mu.Unlock()
	}
	if len(actors) != c.Contenders {
		return nil, fmt.Errorf("matrix: %s opened %d actors for %d contenders", f.Row.Mechanism, len(actors), c.Contenders)
	}
	return actors, nil
}

// Do runs one operation of a on key and records it. An error is counted
// (typed when it matches one of the root package's sentinels, ErrFenced or
// a context error) and returned; from the first failed operation to the
// next one that succeeds the mechanism counts as unavailable.
func (f *FaultRun) Do(ctx context.Context, a Actor, key string) (Result, error) {
	r, err := a.Op(ctx, key)
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if Typed(err) {
			f.typed++
		} else {
			f.other++
		}
		if f.errExample == "" {
			f.errExample = err.Error()
		}
		if f.failingSince.IsZero() {
			f.failingSince = now
		}
		return r, err
	}
	f.ops++
	if r == Refused {
		f.refused++
	} else {
		f.done++
	}
	if !f.failingSince.IsZero() {
		f.unavailable += now.Sub(f.failingSince)
		f.failingSince = time.Time{}
	}
	return r, nil
}

// Load runs ops operations on each of actors concurrently, contender i on
// the keys c.Keys gives it (see HotKey, ManyKeys), recording each with Do;
// it returns when all are done or ctx ends. Errors are recorded, not
// returned: a fault makes them.
func (f *FaultRun) Load(ctx context.Context, c *Cell, actors []Actor, ops int) {
	var wg sync.WaitGroup
	for i, a := range actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < ops && ctx.Err() == nil; j++ {
				f.Do(ctx, a, KeyOf(c, i, j))
			}
		}()
	}
	wg.Wait()
}

// Unavailable adds d to the time the mechanism refused to serve, for a
// fault that measures it itself.
func (f *FaultRun) Unavailable(d time.Duration) {
	f.mu.Lock()
	f.unavailable += d
	f.mu.Unlock()
}

// Anomaly adds n anomalies found by a history checker (porcupine, a
// fenced register), with one printed example.
func (f *FaultRun) Anomaly(n int, example string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.anomalies += n
	if f.example == "" && example != "" {
		f.example = example
	}
}

// Note adds a line that docs/matrix.md prints with the fault's result:
// how the fault was made, what was measured.
func (f *FaultRun) Note(format string, args ...any) {
	f.mu.Lock()
	f.notes = append(f.notes, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

// Typed reports whether err is one of the errors a mechanism promises:
// the root package's sentinels, ErrFenced, a stale versioned write, a
// retry policy that gave up (retry.ErrExhausted), or a context's end.
func Typed(err error) bool {
	for _, s := range []error{sqlock.ErrNotAcquired, sqlock.ErrTimeout, sqlock.ErrLost, sqlock.ErrNoLeader,
		sqlock.ErrUnsupported, ErrFenced, vmodel.ErrStale, retry.ErrExhausted, context.DeadlineExceeded, context.Canceled} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// finish checks every cell, closes the actors and derives the verdict.
func (f *FaultRun) finish(ctx context.Context) (FaultResult, error) {
	f.mu.Lock()
	closers := f.closers
	f.closers = nil
	f.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	for _, c := range f.cells {
		n, ex, err := checkCell(ctx, f.Row, c)
		if err != nil {
			return FaultResult{}, err
		}
		f.Anomaly(n, ex)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	end := time.Now()
	if !f.failingSince.IsZero() {
		f.unavailable += end.Sub(f.failingSince)
	}
	r := FaultResult{
		Mechanism: f.Row.Mechanism, Group: f.Row.Group, Fault: f.Fault.Name, Workload: f.Workload,
		Expect: f.Fault.Expect, Ops: f.ops, Done: f.done, Refused: f.refused,
		TypedErrors: f.typed, OtherErrors: f.other, ErrorExample: f.errExample,
		UnavailableSeconds: f.unavailable.Seconds(), Anomalies: f.anomalies, Example: f.example,
		Seconds: end.Sub(f.start).Seconds(), Notes: f.notes,
	}
	switch {
	case r.Anomalies > 0:
		r.Verdict = Unsafe
	case r.TypedErrors+r.OtherErrors > 0 || f.unavailable > 0:
		r.Verdict = Unavailable
	default:
		r.Verdict = Safe
	}
	return r, nil
}

func checkCell(ctx context.Context, row *Row, c *Cell) (int, string, error) {
	if row.Check != nil {
		return row.Check(ctx, c)
	}
	return c.State.Check(ctx)
}
