package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// pooled is a Locker together with a check of every idle connection of
// its pool.
type pooled struct {
	l *advisory.Locker
	// checkIdle runs f on each idle connection of the pool and returns how
	// many it checked.
	checkIdle func(t *testing.T, f func(query func(q string, dest ...any) error)) int
}

func sqlPooled(sdb *sql.DB, opts ...advisory.Option) pooled {
	return pooled{advisory.New(sdb, opts...), func(t *testing.T, f func(func(string, ...any) error)) int {
		ctx := context.Background()
		n := sdb.Stats().Idle
		conns := make([]*sql.Conn, 0, n)
		for i := 0; i < n; i++ {
			c, err := sdb.Conn(ctx)
			if err != nil {
				t.Fatalf("pooled connection %d unusable: %v", i, err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			f(func(q string, dest ...any) error { return c.QueryRowContext(ctx, q).Scan(dest...) })
			c.Close()
		}
		return n
	}}
}

func pgxPooled(p *pgxpool.Pool, opts ...advisory.Option) pooled {
	return pooled{advisory.NewPool(p, opts...), func(t *testing.T, f func(func(string, ...any) error)) int {
		ctx := context.Background()
		conns := p.AcquireAllIdle(ctx)
		for _, c := range conns {
			f(func(q string, dest ...any) error { return c.QueryRow(ctx, q).Scan(dest...) })
			c.Release()
		}
		return len(conns)
	}}
}

// TestNoLeakUnderCancellation: thousands of acquisitions whose contexts end
// at random points — before the call, while waiting, right after the
// grant, by deadline, inside Do — with a keepalive short enough to run
// concurrently with unlocks. Throughout, no two exclusive holders (and no
// reader with a writer) are inside a key at once in this process;
// afterwards no advisory lock is left in the database, no goroutine is
// left, and every pooled connection works, holds nothing and has the
// default timeouts.
func TestNoLeakUnderCancellation(t *testing.T) {
	const iterations = 1000 // per backend
	const workers = 12
	setups := []struct {
		name string
		open func(t *testing.T, db *pgtest.DB, opts ...advisory.Option) pooled
	}{
		{"sql-pgx", func(t *testing.T, db *pgtest.DB, opts ...advisory.Option) pooled {
			sdb := db.OpenSQL()
			sdb.SetMaxIdleConns(32) // keep connections pooled, so that they can be checked
			return sqlPooled(sdb, opts...)
		}},
		{"pgxpool", func(t *testing.T, db *pgtest.DB, opts ...advisory.Option) pooled {
			return pgxPooled(pgxPoolWith(t, db, 32), opts...)
		}},
		{"sql-libpq", func(t *testing.T, db *pgtest.DB, opts ...advisory.Option) pooled {
			sdb := openLibPQ(t, db.DSN)
			sdb.SetMaxIdleConns(32)
			return sqlPooled(sdb, opts...)
		}},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			leakCheck(t)
			db := pgtest.New(t)
			p := s.open(t, db, advisory.WithTimeout(time.Minute), advisory.WithKeepalive(time.Millisecond))
			keys := []advisory.Key{advisory.KeyOf("c0"), advisory.KeyOf("c1"), advisory.KeyInt(2), advisory.KeyPair(3, 3)}
			var writers, readers [4]atomic.Int32
			var counts sync.Map // category → *atomic.Int64
			count := func(c string) {
				v, _ := counts.LoadOrStore(c, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
			var next atomic.Int64
			var win window
			win.ns.Store(int64(3 * time.Millisecond))
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= iterations {
						ki := rand.IntN(len(keys))
						if err := cancelIteration(p.l, keys[ki], &writers[ki], &readers[ki], count, &win); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			waitNoLocks(t, admin(t, db))
			n := p.checkIdle(t, func(query func(string, ...any) error) {
				var held int
				var lockTimeout, stmtTimeout string
				if err := query(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`, &held); err != nil {
					t.Fatalf("pooled connection unusable: %v", err)
				}
				if err := query("SHOW lock_timeout", &lockTimeout); err != nil {
					t.Fatal(err)
				}
				if err := query("SHOW statement_timeout", &stmtTimeout); err != nil {
					t.Fatal(err)
				}
				if held != 0 || lockTimeout != "0" || stmtTimeout != "0" {
					t.Fatalf("pooled connection holds %d advisory locks, lock_timeout %s, statement_timeout %s",
						held, lockTimeout, stmtTimeout)
				}
			})
			if n == 0 {
				t.Fatal("no idle pooled connection to check")
			}
			summary := ""
			counts.Range(func(k, v any) bool {
				summary += fmt.Sprintf(" %s=%d", k, v.(*atomic.Int64).Load())
				return true
			})
			t.Logf("%d acquisitions:%s; %d pooled connections checked; cancellation window at the end %v",
				iterations, summary, n, time.Duration(win.ns.Load()))
			for _, c := range []string{"cancelled-before", "cancelled-waiting", "acquired-then-cancelled", "deadline", "acquired"} {
				if v, ok := counts.Load(c); !ok || v.(*atomic.Int64).Load() == 0 {
					t.Errorf("no iteration ended as %s: the test did not exercise it", c)
				}
			}
		})
	}
}

// cancelIteration is one acquisition with a context that ends at a random
// point.
func cancelIteration(l *advisory.Locker, key advisory.Key, writers, readers *atomic.Int32, count func(string), win *window) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shared := rand.IntN(5) == 0
	enter := func() error {
		if shared {
			readers.Add(1)
			if n := writers.Load(); n != 0 {
				return fmt.Errorf("%v: a reader entered while %d writers held it", key, n)
			}
			return nil
		}
		if n := writers.Add(1); n != 1 {
			return fmt.Errorf("%v: %d exclusive holders at once", key, n)
		}
		if n := readers.Load(); n != 0 {
			return fmt.Errorf("%v: a writer entered while %d readers held it", key, n)
		}
		return nil
	}
	exit := func() {
		if shared {
			readers.Add(-1)
		} else {
			writers.Add(-1)
		}
	}
	hold := func() { time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) }
	lock := l.Lock
	if shared {
		lock = l.RLock
	}
	mode := rand.IntN(5)
	switch mode {
	case 0: // cancelled before the call
		cancel()
	case 1: // cancelled while (probably) waiting
		time.AfterFunc(win.draw(), cancel)
	case 2: // a deadline
		var dcancel context.CancelFunc
		ctx, dcancel = context.WithTimeout(ctx, win.draw())
		defer dcancel()
	case 4: // Do, cancelled at a random point
		time.AfterFunc(win.draw(), cancel)
		do := l.Do
		if shared {
			do = l.DoShared
		}
		var inside error
		err := do(ctx, key, func(ctx context.Context) error {
			if inside = enter(); inside != nil {
				return nil
			}
			hold()
			exit()
			return nil
		})
		if inside != nil {
			return inside
		}
		win.adapt(err == nil)
		return classify(err, mode, count)
	}
	lk, err := lock(ctx, key)
	if mode == 1 || mode == 2 {
		win.adapt(err == nil)
	}
	if err != nil {
		return classify(err, mode, count)
	}
	if err := enter(); err != nil {
		return err
	}
	hold()
	exit()
	if mode == 3 { // cancelled right after the grant; the unlock must still happen
		cancel()
		count("acquired-then-cancelled")
	} else {
		count("acquired")
	}
	if err := lk.Release(ctx); err != nil {
		return fmt.Errorf("unlock with a cancelled context: %w", err)
	}
	return nil
}

func classify(err error, mode int, count func(string)) error {
	switch {
	case err == nil:
		count("acquired")
	case errors.Is(err, advisory.ErrTimeout) && errors.Is(err, context.DeadlineExceeded):
		count("deadline")
	case errors.Is(err, context.Canceled) && mode == 0:
		count("cancelled-before")
	case errors.Is(err, context.Canceled):
		count("cancelled-waiting")
	default:
		return fmt.Errorf("unexpected error: %w", err)
	}
	return nil
}

// window is the range the random cancellation points are drawn from. It
// adapts to the machine's speed as the run goes (a staircase): a call the
// cancellation did not reach shrinks it, one it reached grows it, so that
// about half the calls end each way whether the machine is idle or busy,
// and every category of ending is exercised.
type window struct{ ns atomic.Int64 }

func (w *window) draw() time.Duration { return rand.N(time.Duration(w.ns.Load())) }

func (w *window) adapt(completed bool) {
	for {
		old := w.ns.Load()
		next := old + old/8
		if completed {
			next = old - old/8
		}
		next = min(max(next, int64(100*time.Microsecond)), int64(10*time.Second))
		if w.ns.CompareAndSwap(old, next) {
			return
		}
	}
}

// TestCancelledWaitLeavesTheQueue: a Lock whose caller cancels while it is
// queued behind a holder returns only once the server has left the wait —
// a connection closed mid-wait leaves its backend queued until the server
// notices, and once the holder releases, that orphan takes the lock ahead
// of live callers. Right after the cancelled Lock returns, no backend waits
// for the key, and once the holder releases, a TryLock takes it at once;
// the connection the wait used goes back to the pool holding nothing.
func TestCancelledWaitLeavesTheQueue(t *testing.T) {
	const rounds = 20
	db := pgtest.New(t)
	a := admin(t, db)
	waiting := func(k advisory.Key) int {
		var n int
		classid, objid, objsubid := k.Locktag()
		if err := a.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND objid = $2 AND objsubid = $3`,
			int64(classid), int64(objid), objsubid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	setups := []struct {
		name string
		open func() *advisory.Locker
	}{
		{"sql-pgx", func() *advisory.Locker { return advisory.New(db.OpenSQL(), advisory.WithTimeout(time.Hour)) }},
		{"pgxpool", func() *advisory.Locker {
			return advisory.NewPool(pgxPoolWith(t, db, 8), advisory.WithTimeout(time.Hour))
		}},
		{"sql-libpq", func() *advisory.Locker { return advisory.New(openLibPQ(t, db.DSN), advisory.WithTimeout(time.Hour)) }},
		{"multiplexed", func() *advisory.Locker {
			return advisory.New(db.OpenSQL(), advisory.WithTimeout(time.Hour), advisory.WithMultiplexing(2))
		}},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			ctx := context.Background()
			l := s.open()
			for i := range rounds {
				key := advisory.KeyOf(fmt.Sprintf("queue-%s-%d", s.name, i))
				holder, err := l.Lock(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Release(ctx) // after a failure; a second Release is a no-op
				cctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() {
					lk, err := l.Lock(cctx, key)
					if lk != nil {
						lk.Release(ctx)
					}
					done <- err
				}()
				waitUntil(t, "the second Lock is queued", func() bool { return waiting(key) == 1 })
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("round %d: cancelled Lock: %v, want context.Canceled", i, err)
				}
				if n := waiting(key); n != 0 {
					t.Fatalf("round %d: %d backends still queued for the key after the cancelled Lock returned", i, n)
				}
				if err := holder.Release(ctx); err != nil {
					t.Fatal(err)
				}
				lk, err := l.TryLock(ctx, key)
				if err != nil {
					t.Fatalf("round %d: TryLock right after the holder's release: %v", i, err)
				}
				if err := lk.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
