package txlock_test

import (
	"context"
	"errors"
	"fmt"
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

// TestCancelledWaitLeavesTheQueue: a locked transaction whose caller
// cancels while its lock waits behind a holder returns only once the server
// has left the wait. A connection closed mid-wait (what database/sql does
// to a transaction whose context ends, and pgx's default to a statement)
// leaves its backend queued until the server notices; granted the lock
// meanwhile, that orphan holds it ahead of live callers. Right after the
// cancelled call returns no backend waits for the key, once the holder
// releases the key is free at once, and the handle goes on serving.
func TestCancelledWaitLeavesTheQueue(t *testing.T) {
	const rounds = 10
	db := pgtest.New(t)
	admin := db.Pool()
	queued := func(key advisory.Key) int {
		c, o, s := key.Locktag()
		var n int
		if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND NOT granted AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = $3`, int64(c), int64(o), int16(s)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			for i := range rounds {
				key := advisory.KeyOf(fmt.Sprintf("queue-%s-%d", be.name, i))
				h := holdLocks(t, db, false, key)
				cctx, cancel := context.WithCancel(ctx)
				ran := false
				done := make(chan error, 1)
				go func() {
					done <- be.do(cctx, []advisory.Key{key}, func(context.Context, q) error { ran = true; return nil },
						txlock.WithTimeout(time.Hour), txlock.WithoutRetry())
				}()
				waitForWaiter(t, admin, key)
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("round %d: cancelled call: %v, want context.Canceled", i, err)
				}
				if ran {
					t.Fatalf("round %d: fn ran for a cancelled call", i)
				}
				if n := queued(key); n != 0 {
					t.Fatalf("round %d: %d backends still queued for the key after the cancelled call returned", i, n)
				}
				h.release()
				var free bool
				k := string(key.AppendArgs(nil))
				if err := admin.QueryRow(ctx, "SELECT pg_try_advisory_lock("+k+")").Scan(&free); err != nil {
					t.Fatal(err)
				}
				if !free {
					t.Fatalf("round %d: the key is held by someone right after the holder released it", i)
				}
				if _, err := admin.Exec(ctx, "SELECT pg_advisory_unlock("+k+")"); err != nil {
					t.Fatal(err)
				}
				if err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { return nil }); err != nil {
					t.Fatalf("round %d: the next call on the handle: %v", i, err)
				}
			}
		})
	}
}
