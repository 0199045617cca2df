package txlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// TestRandomCancellation: locked transactions on a few contended keys whose
// contexts end at random moments — before BEGIN, while BEGIN and the locks
// are in flight or waiting, inside fn, around COMMIT — on every kind of
// handle. A row counts each key's increments: it must equal the calls that
// returned nil, plus at most the COMMITs reported as ambiguous (those may or
// may not have committed; nothing else may). Afterwards no advisory lock is
// left on the server, no goroutine is left, and the handle still runs
// locked transactions.
func TestRandomCancellation(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec("CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL)")
	admin := db.Pool()
	for bi, be := range backends(t, db, bePgxPool, beSQL, beFold, bePQ) {
		t.Run(be.name, func(t *testing.T) {
			base := 10 * (bi + 1)
			db.Exec("INSERT INTO counter SELECT g, 0 FROM generate_series($1::int + 1, $1::int + 3) g", base)
			increment := func(id int) func(context.Context, q) error {
				return func(ctx context.Context, tx q) error {
					n, err := tx.Int(ctx, "SELECT n FROM counter WHERE id = $1", id)
					if err != nil {
						return err
					}
					return tx.Exec(ctx, "UPDATE counter SET n = $1 WHERE id = $2", n+1, id)
				}
			}
			const workers, each = 8, 60
			var ok, ambiguous [3]atomic.Int64
			// Each call's deadline is drawn uniformly below a bound that
			// adapts to the machine's speed as the run goes (a staircase):
			// a success shrinks it, a failure grows it, so about half the
			// calls succeed on a fast machine or a busy one, and the
			// deadlines spread over every point of a call — before BEGIN,
			// the lock wait, fn, COMMIT. It starts from the latency of
			// uncontended calls measured now.
			var bound atomic.Int64
			bound.Store(int64(4 * callLatency(t, be, func(ctx context.Context, tx q) error {
				_, err := tx.Int(ctx, "SELECT n FROM counter WHERE id = $1", base+1)
				return err
			})))
			adapt := func(succeeded bool) {
				for {
					old := bound.Load()
					next := old + old/8
					if succeeded {
						next = old - old/8
					}
					next = min(max(next, int64(time.Millisecond)), int64(10*time.Second))
					if bound.CompareAndSwap(old, next) {
						return
					}
				}
			}
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						i := rand.IntN(3)
						ctx, cancel := context.WithTimeout(context.Background(), rand.N(time.Duration(bound.Load())))
						err := be.do(ctx, []advisory.Key{advisory.KeyPair(5, int32(base+1+i))}, increment(base+1+i),
							txlock.WithTimeout(time.Minute))
						cancel()
						adapt(err == nil)
						switch {
						case err == nil:
							ok[i].Add(1)
						case errors.Is(err, txlock.ErrAmbiguousCommit):
							ambiguous[i].Add(1)
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("deadline bound at the end: %v", time.Duration(bound.Load()))
			var succeeded int64
			for i := range 3 {
				succeeded += ok[i].Load()
				var n int64
				if err := admin.QueryRow(context.Background(), "SELECT n FROM counter WHERE id = $1", base+1+i).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n < ok[i].Load() || n > ok[i].Load()+ambiguous[i].Load() {
					t.Fatalf("row %d = %d, but %d calls succeeded and %d had an unknown outcome", i, n, ok[i].Load(), ambiguous[i].Load())
				}
				t.Logf("key %d: %d successes, %d of %d ambiguous commits committed", i, ok[i].Load(), n-ok[i].Load(), ambiguous[i].Load())
			}
			if succeeded == 0 || succeeded == workers*each {
				t.Fatalf("%d of %d calls succeeded: the cancellation points missed", succeeded, workers*each)
			}
			waitNoLocks(t, admin)
			for i := range 3 {
				if err := be.do(context.Background(), []advisory.Key{advisory.KeyPair(5, int32(base+1+i))}, increment(base+1+i)); err != nil {
					t.Fatalf("a locked transaction after the run: %v", err)
				}
			}
		})
	}
}

// callLatency is the median time of a few uncontended calls of fn through
// be, measured now (so on a busy machine it is the busy latency).
func callLatency(t *testing.T, be backend, fn func(context.Context, q) error) time.Duration {
	t.Helper()
	var d [5]time.Duration
	for i := range d {
		start := time.Now()
		if err := be.do(context.Background(), []advisory.Key{advisory.KeyPair(5, 0)}, fn); err != nil {
			t.Fatal(err)
		}
		d[i] = time.Since(start)
	}
	slices.Sort(d[:])
	return d[len(d)/2]
}
