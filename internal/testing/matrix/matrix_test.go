package matrix_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// staleWrite is the pause anomaly by construction: a holder reads, a
// second holder applies the whole operation, then the first writes what it
// read. Fenced, the first holder's token (1) is older than the second's (2).
func staleWrite(ctx context.Context, s *matrix.State, q matrix.Querier, key string, fenced bool) error {
	var old, young int64
	if fenced {
		old, young = 1, 2
	}
	it, err := s.Read(ctx, q, key)
	if err != nil {
		return err
	}
	if _, err := s.Apply(ctx, q, key, young); err != nil {
		return err
	}
	qty, _ := it.Next()
	res, err := q.ExecContext(ctx, "UPDATE "+s.Items+" SET qty = $2 WHERE key = $1 AND ($3 = 0 OR fence <= $3)", key, qty, old)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return matrix.ErrFenced
	}
	return s.Record(ctx, q, key, old)
}

// Each workload's Check counts the anomaly a stale unguarded write makes
// and prints it; the fenced stale write is refused and leaves none.
func TestCheckCountsStaleWrites(t *testing.T) {
	ctx := t.Context()
	db := pgtest.New(t).SQL()
	for _, w := range matrix.Workloads {
		for _, fenced := range []bool{false, true} {
			s, err := matrix.NewState(ctx, db, w, 3, matrix.WithStock(5))
			if err != nil {
				t.Fatal(err)
			}
			err = staleWrite(ctx, s, db, s.Key(1), fenced)
			if fenced != errors.Is(err, matrix.ErrFenced) {
				t.Fatalf("%s fenced=%v: %v", w, fenced, err)
			}
			n, ex, err := s.Check(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := 1
			if fenced {
				want = 0
			}
			if n != want || (want > 0) != strings.Contains(ex, "k1") {
				t.Fatalf("%s fenced=%v: %d anomalies (%q), want %d", w, fenced, n, ex, want)
			}
			t.Logf("%s fenced=%v: %d anomalies %s", w, fenced, n, ex)
		}
	}
}

// Apply refuses a second charge, a second booking and a sale past the
// stock: a correct no, not an error.
func TestApplyRefuses(t *testing.T) {
	ctx := t.Context()
	db := pgtest.New(t).SQL()
	for _, w := range matrix.Workloads {
		s, err := matrix.NewState(ctx, db, w, 1, matrix.WithStock(1))
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []matrix.Result{matrix.Done, matrix.Refused} {
			if r, err := s.Apply(ctx, db, s.Key(0), 0); err != nil || r != want {
				t.Fatalf("%s op %d: %v %v, want %v", w, i, r, err, want)
			}
		}
		if n, ex, err := s.Check(ctx); n != 0 || err != nil {
			t.Fatalf("%s: %d anomalies %q %v", w, n, ex, err)
		}
	}
}

// NewState refuses what it cannot make, with an error.
func TestNewStateRefusesBadInput(t *testing.T) {
	db := pgtest.New(t).SQL()
	for _, tc := range []struct {
		w    matrix.Workload
		keys int
	}{{"nope", 1}, {matrix.Stock, 0}} {
		if _, err := matrix.NewState(t.Context(), db, tc.w, tc.keys); err == nil {
			t.Fatalf("%q with %d keys: no error", tc.w, tc.keys)
		}
	}
}

// mutexRow guards Apply with one process-wide mutex: the reference lock.
func mutexRow(faults ...matrix.Fault) matrix.Row {
	return matrix.Row{
		Mechanism: "mutex",
		Workloads: matrix.Workloads,
		Open: func(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
			var mu sync.Mutex
			actors := make([]matrix.Actor, c.Contenders)
			for i := range actors {
				actors[i] = matrix.ActorFunc(func(ctx context.Context, key string) (matrix.Result, error) {
					mu.Lock()
					defer mu.Unlock()
					return c.State.Apply(ctx, c.DB, key, 0)
				})
			}
			return actors, nil, nil
		},
		Faults: faults,
	}
}

// Run drives every cell of a mutex-guarded row with no anomaly, and each
// fault's verdict is derived from what it recorded: a stale write made by
// construction is unsafe, its fenced form safe, a fault whose every
// operation fails unavailable.
func TestRunDerivesVerdicts(t *testing.T) {
	stale := func(fenced bool) func(ctx context.Context, f *matrix.FaultRun) error {
		return func(ctx context.Context, f *matrix.FaultRun) error {
			c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 2, matrix.HotKey, 4)
			if err != nil {
				return err
			}
			actors, err := f.Actors(ctx, c)
			if err != nil {
				return err
			}
			f.Load(ctx, c, actors, 2)
			if err := staleWrite(ctx, c.State, c.DB, c.State.Key(3), fenced); err != nil && !errors.Is(err, matrix.ErrFenced) {
				return err
			}
			return nil
		}
	}
	down := func(ctx context.Context, f *matrix.FaultRun) error {
		a := matrix.ActorFunc(func(ctx context.Context, key string) (matrix.Result, error) {
			return 0, context.DeadlineExceeded
		})
		f.Do(ctx, a, "k0")
		return nil
	}
	matrix.Run(t, mutexRow(
		matrix.Fault{Name: "stale unfenced", Expect: matrix.Unsafe, Run: stale(false)},
		matrix.Fault{Name: "stale fenced", Expect: matrix.Safe, Run: stale(true)},
		matrix.Fault{Name: "down", Expect: matrix.Unavailable, Run: down},
	))
}

// TestModeFromEnv: unset and "quick" are the quick grid, "full" the full
// one, and anything else (a typo, the retired "smoke") is refused by name
// rather than run as some grid.
func TestModeFromEnv(t *testing.T) {
	for v, want := range map[string]matrix.Mode{"": matrix.Quick, "quick": matrix.Quick, "full": matrix.Full} {
		t.Setenv("MATRIX", v)
		if got, err := matrix.ModeFromEnv(); err != nil || got != want {
			t.Errorf("MATRIX=%q: %q, %v; want %q", v, got, err, want)
		}
	}
	for _, v := range []string{"smoke", "Full", "ful"} {
		t.Setenv("MATRIX", v)
		if got, err := matrix.ModeFromEnv(); err == nil || !strings.Contains(err.Error(), `"`+v+`"`) {
			t.Errorf("MATRIX=%q: %q, %v; want an error naming it", v, got, err)
		}
	}
}
