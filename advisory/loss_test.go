package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/observetest"
	"github.com/sqlock/sqlock/internal/pgtest"
	"github.com/sqlock/sqlock/internal/schedlag"
	"github.com/sqlock/sqlock/observe"
)

// lossKeepalive is the keepalive interval of the loss tests.
const lossKeepalive = 250 * time.Millisecond

// lossWatch measures, while a test waits for a loss to be reported, what
// the bound on that report depends on: when the server ended the lock's
// session (its backend left pg_stat_activity, seen by polling on a
// connection of its own), and how late this machine's timers fire
// meanwhile (a busy machine delays the keepalive's timer and goroutines
// alike). Lost must fire within the documented 1¼ keepalive intervals of
// the session's end, plus that lateness and a few round trips.
type lossWatch struct {
	lat  time.Duration // round-trip latency measured before
	stop chan struct{}
	done chan struct{}

	lag     *schedlag.Watch
	mu      sync.Mutex
	gone    time.Time // when the backend was seen gone
	pollErr error
}

func (w *lossWatch) goneAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

func watchLoss(t *testing.T, db *pgtest.DB, pid uint32) *lossWatch {
	t.Helper()
	conn := admin(t, db)
	w := &lossWatch{lat: db.Latency(), lag: schedlag.Start(), stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { w.lag.Stop() })
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			time.Sleep(time.Millisecond)
			if w.goneAt().IsZero() {
				var n int
				err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
				w.mu.Lock()
				switch {
				case err != nil:
					w.pollErr = err
				case n == 0:
					w.gone = time.Now()
				}
				w.mu.Unlock()
				if err != nil {
					return
				}
			}
		}
	}()
	return w
}

// check ends the watch and fails the test if the loss, reported at
// reported, came later than the bound allows.
func (w *lossWatch) check(t *testing.T, what string, reported time.Time) {
	t.Helper()
	// The loss may be reported before the poll sees the backend gone; the
	// watch goes on until the poll does.
	waitUntil(t, "the terminated backend is gone", func() bool {
		select {
		case <-w.done: // the poll failed
			return true
		default:
		}
		return !w.goneAt().IsZero()
	})
	close(w.stop)
	<-w.done
	late := w.lag.Stop()
	if w.pollErr != nil {
		t.Fatal(w.pollErr)
	}
	bound := 5*lossKeepalive/4 + 2*late + 20*w.lat
	if d := reported.Sub(w.gone); d > bound {
		t.Fatalf("%s %v after the server ended the session; the bound is %v (1¼ keepalive intervals, timers up to %v late, round trips of %v)",
			what, d, bound, late, w.lat)
	}
	t.Logf("%s %v after the server ended the session (keepalive %v, timers up to %v late)",
		what, reported.Sub(w.gone).Round(time.Millisecond), lossKeepalive, late.Round(time.Millisecond))
}

func TestLostOnTerminate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)
		var rec observetest.Recorder
		l := bc.open(t, db, advisory.WithKeepalive(lossKeepalive), advisory.WithObserver(&rec))
		key := advisory.KeyOf("lost")
		lk := mustLock(t)(l.Lock(ctx, key))
		pids := holderPIDs(t, conn, key)
		if len(pids) != 1 {
			t.Fatalf("%d holders of %v", len(pids), key)
		}
		got := make(chan *advisory.Lock, 1)
		go func() {
			w, err := bc.open(t, db, advisory.WithTimeout(time.Minute)).Lock(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		waitUntil(t, "the waiter queues", func() bool { return waiting(t, conn, key) == 1 })

		watch := watchLoss(t, db, pids[0])
		if err := db.Cluster.TerminateBackend(ctx, pids[0]); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lk.Lost():
			watch.check(t, "Lost fired", time.Now())
		case <-time.After(30 * time.Second):
			t.Fatal("Lost never fired after the holder's backend was terminated")
		}
		if !errors.Is(lk.Err(), advisory.ErrLost) {
			t.Fatalf("Err after loss: %v, want ErrLost", lk.Err())
		}
		w := <-got // the waiter acquires
		if w == nil {
			t.FailNow()
		}
		if pids := holderPIDs(t, conn, key); len(pids) != 1 {
			t.Fatalf("%d holders after the waiter acquired", len(pids))
		}
		if err := lk.Release(ctx); !errors.Is(err, advisory.ErrLost) {
			t.Fatalf("Release of a lost lock: %v, want ErrLost", err)
		}
		mustRelease(t, w)
		if n := rec.Outcomes()[observe.Lost]; n != 1 {
			t.Fatalf("%d Lost events, want 1", n)
		}
		waitNoLocks(t, conn)
	})
}

func TestDoContextEndsOnLoss(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)
		l := bc.open(t, db, advisory.WithKeepalive(lossKeepalive))
		key := advisory.KeyPair(1, 2)
		var watch *lossWatch
		var ended time.Time
		var cause error
		err := l.Do(ctx, key, func(ctx context.Context) error {
			pids := holderPIDs(t, conn, key)
			if len(pids) != 1 {
				t.Errorf("%d holders inside Do", len(pids))
				return nil
			}
			watch = watchLoss(t, db, pids[0])
			if err := db.Cluster.TerminateBackend(ctx, pids[0]); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				ended = time.Now()
				cause = context.Cause(ctx)
				return ctx.Err()
			case <-time.After(30 * time.Second):
				t.Error("Do's context did not end after the lock's backend was terminated")
				return nil
			}
		})
		if !errors.Is(err, advisory.ErrLost) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Do after loss: %v, want the function's context.Canceled joined with ErrLost", err)
		}
		if !errors.Is(cause, advisory.ErrLost) {
			t.Fatalf("cause of Do's context: %v, want ErrLost", cause)
		}
		watch.check(t, "Do's context ended", ended)
		waitNoLocks(t, conn)
	})
}

// TestServerRestart: a server stop mid-run turns into typed errors —
// ErrLost for held locks, ErrUnavailable for new ones — and work resumes
// after the restart.
func TestServerRestart(t *testing.T) {
	leakCheck(t)
	c := pgtest.NewCluster(t, pgtest.Options{})
	db := c.NewDB(t)
	ctx := context.Background()
	// A short bound keeps the workers' waits short while the server is
	// down; widened by the latency measured now, so that a busy machine
	// does not time out the held locks' first, uncontended acquisition.
	bound := 2*time.Second + 100*db.Latency()
	lockers := map[string]*advisory.Locker{
		"sql-pgx": advisory.New(db.OpenSQL(), advisory.WithKeepalive(lossKeepalive), advisory.WithTimeout(bound)),
		"pgxpool": advisory.NewPool(pgxPoolWith(t, db, 16), advisory.WithKeepalive(lossKeepalive),
			advisory.WithTimeout(bound)),
	}
	held := map[string]*advisory.Lock{}
	for name, l := range lockers {
		held[name] = mustLock(t)(l.Lock(ctx, advisory.KeyOf("restart:held:"+name)))
	}

	// Workers lock and unlock throughout; every error they see must be
	// one of the typed ones.
	var stop atomic.Bool
	var ok, typed atomic.Int64
	var mu sync.Mutex
	var untyped []error
	var wg sync.WaitGroup
	for name, l := range lockers {
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					key := advisory.KeyInt(int64(rand.IntN(4)))
					lk, err := l.Lock(ctx, key)
					if err == nil {
						time.Sleep(time.Millisecond)
						err = lk.Release(ctx)
					}
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, advisory.ErrUnavailable), errors.Is(err, advisory.ErrLost),
						errors.Is(err, advisory.ErrTimeout):
						typed.Add(1)
						time.Sleep(10 * time.Millisecond)
					default:
						mu.Lock()
						untyped = append(untyped, err)
						mu.Unlock()
						_ = name
					}
				}
			}()
		}
	}
	waitUntil(t, "the workers get going", func() bool { return ok.Load() > 20 })

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, lk := range held {
		select {
		case <-lk.Lost():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: Lost did not fire after the server stopped", name)
		}
		if err := lk.Release(ctx); !errors.Is(err, advisory.ErrLost) {
			t.Fatalf("%s: Release after the server stopped: %v, want ErrLost", name, err)
		}
	}
	for name, l := range lockers {
		if _, err := l.TryLock(ctx, advisory.KeyInt(99)); !errors.Is(err, advisory.ErrUnavailable) {
			t.Fatalf("%s: TryLock while the server is down: %v, want ErrUnavailable", name, err)
		}
	}
	typedDown := typed.Load()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	okBefore := ok.Load()
	waitUntil(t, "the workers recover", func() bool { return ok.Load() > okBefore+20 })
	stop.Store(true)
	wg.Wait()
	for name, l := range lockers {
		// Pooled connections from before the restart are dead; each call
		// that meets one gets ErrUnavailable and the pool drops it.
		var err error
		for i := 0; i < 50; i++ {
			var lk *advisory.Lock
			if lk, err = l.TryLock(ctx, advisory.KeyInt(99)); err == nil {
				err = lk.Release(ctx)
				break
			}
			if !errors.Is(err, advisory.ErrUnavailable) {
				t.Fatalf("%s: after restart: %v", name, err)
			}
		}
		if err != nil {
			t.Fatalf("%s: no recovery after restart: %v", name, err)
		}
	}
	if len(untyped) > 0 {
		t.Fatalf("%d untyped errors during the restart, first: %v", len(untyped), untyped[0])
	}
	t.Logf("%d cycles ok, %d typed errors (%d while down)", ok.Load(), typed.Load(), typedDown)
	waitNoLocks(t, admin(t, db))
}

// TestKeepaliveKeepsIdleHoldAlive: a server that ends idle sessions
// (idle_session_timeout) would silently drop a lock held without traffic;
// the keepalive checks are traffic.
func TestKeepaliveKeepsIdleHoldAlive(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	// Ten keepalive intervals, widened by the latency measured now, so
	// that a check delayed by a busy machine is not taken for idleness.
	idle := time.Second + 40*db.Latency()
	db.Exec(fmt.Sprintf("ALTER DATABASE %s SET idle_session_timeout = '%dms'", db.Name, idle.Milliseconds()))
	ctx := context.Background()
	l := advisory.NewPool(pgxPoolWith(t, db, 4), advisory.WithKeepalive(100*time.Millisecond))
	lk := mustLock(t)(l.Lock(ctx, advisory.KeyOf("idle")))
	select {
	case <-lk.Lost():
		t.Fatalf("lost while idle despite the keepalive: %v", lk.Err())
	case <-time.After(3 * idle): // well past the idle timeout
	}
	mustRelease(t, lk)
}

// TestReleaseFindsLoss: with no keepalive check in between, Release itself
// finds the session gone: ErrLost, Lost closed, the dead connection
// destroyed rather than pooled.
func TestReleaseFindsLoss(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)
		var rec observetest.Recorder
		l := bc.open(t, db, advisory.WithKeepalive(time.Hour), advisory.WithObserver(&rec))
		key := advisory.KeyOf("unlock finds loss")
		lk := mustLock(t)(l.Lock(ctx, key))
		pids := holderPIDs(t, conn, key)
		if len(pids) != 1 {
			t.Fatalf("%d holders", len(pids))
		}
		if err := db.Cluster.TerminateBackend(ctx, pids[0]); err != nil {
			t.Fatal(err)
		}
		waitNoLocks(t, conn)
		if err := lk.Release(ctx); !errors.Is(err, advisory.ErrLost) {
			t.Fatalf("Release on a terminated session: %v, want ErrLost", err)
		}
		select {
		case <-lk.Lost():
		default:
			t.Fatal("Lost not closed after Release found the session gone")
		}
		if n := rec.Outcomes()[observe.Lost]; n != 1 {
			t.Fatalf("%d Lost events, want 1", n)
		}
		// The pool did not keep the dead connection: the next lock works.
		mustRelease(t, mustLock(t)(l.TryLock(ctx, key)))
	})
}
