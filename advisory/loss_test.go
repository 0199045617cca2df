package advisory_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
)

// lossKeepalive is the keepalive interval of the loss tests: short, so
// that they are quick. How soon a loss is reported (within 1¼ intervals)
// is timer logic, exact under synctest: TestLossIsReportedByTheNextCheck
// and its neighbours in timers_internal_test.go. The tests here assert
// what only a server shows, and holds at any speed: which locks are lost,
// in what order, with what errors.
const lossKeepalive = 250 * time.Millisecond

// TestLostOnTerminate: pg_terminate_backend of a holder's backend closes
// Lost, Err and Release match ErrLost, one Lost event is reported, and the
// waiter queued behind the lock gets it.
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

		if err := db.Cluster.TerminateBackend(ctx, pids[0]); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lk.Lost():
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
		var cause error
		err := l.Do(ctx, key, func(ctx context.Context) error {
			pids := holderPIDs(t, conn, key)
			if len(pids) != 1 {
				t.Errorf("%d holders inside Do", len(pids))
				return nil
			}
			if err := db.Cluster.TerminateBackend(ctx, pids[0]); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
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
	// The default wait bound: a worker's wait that the stop does not end
	// at once runs out with ErrTimeout, which the workers count as typed.
	lockers := map[string]*advisory.Locker{
		"sql-pgx": advisory.New(db.OpenSQL(), advisory.WithKeepalive(lossKeepalive)),
		"pgxpool": advisory.NewPool(pgxPoolWith(t, db, 16), advisory.WithKeepalive(lossKeepalive)),
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

// TestKeepaliveChecksAreTrafficOnTheHeldSession: a server that ends idle
// sessions (idle_session_timeout) would silently drop a lock held without
// traffic; the keepalive checks are that traffic — statements on the held
// lock's own backend, seen by the server one after another while the
// lock is held and nothing else runs on it. That they come every interval
// to 1¼ intervals is TestKeepaliveChecksEveryIntervalToAQuarterMore, exact
// under synctest; so any idle_session_timeout longer than that (plus a
// check's own bound) never ends a held session.
func TestKeepaliveChecksAreTrafficOnTheHeldSession(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	ctx := context.Background()
	conn := admin(t, db)
	l := advisory.NewPool(pgxPoolWith(t, db, 4), advisory.WithKeepalive(50*time.Millisecond))
	key := advisory.KeyOf("idle")
	lk := mustLock(t)(l.Lock(ctx, key))
	pids := holderPIDs(t, conn, key)
	if len(pids) != 1 {
		t.Fatalf("%d holders", len(pids))
	}
	// Each check is a statement on the backend: its state_change moves on
	// and its last statement is the check.
	var seen []time.Time
	waitUntil(t, "three keepalive checks reach the held session", func() bool {
		var query string
		var changed time.Time
		if err := conn.QueryRow(ctx, "SELECT query, state_change FROM pg_stat_activity WHERE pid = $1",
			int64(pids[0])).Scan(&query, &changed); err != nil {
			t.Fatal(err)
		}
		if query == "SELECT pg_catalog.pg_backend_pid()" && (len(seen) == 0 || changed.After(seen[len(seen)-1])) {
			seen = append(seen, changed)
		}
		return len(seen) >= 3
	})
	if lk.Err() != nil {
		t.Fatalf("lost while held: %v", lk.Err())
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
