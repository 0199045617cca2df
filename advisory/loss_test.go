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
	"github.com/sqlock/sqlock/observe"
)

// lossKeepalive is the keepalive interval of the loss tests.
const lossKeepalive = 250 * time.Millisecond

// lossBound is how soon after its backend is terminated a lock must be
// reported lost: the documented 1¼ keepalive intervals, plus the time this
// machine takes now for the server to end the backend and for the client
// to see it, scaled from the latency measured at run time (on an idle
// machine the whole bound is about 2 intervals).
func lossBound(db *pgtest.DB) time.Duration {
	return 2*lossKeepalive + 40*db.Latency()
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
			w, err := bc.open(t, db, advisory.WithWaitTimeout(time.Minute)).Lock(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		waitUntil(t, "the waiter queues", func() bool { return waiting(t, conn, key) == 1 })

		bound := lossBound(db)
		killed := time.Now()
		if err := db.Cluster.TerminateBackend(ctx, pids[0]); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lk.Lost():
			if d := time.Since(killed); d > bound {
				t.Fatalf("Lost fired %v after the backend was terminated; the bound is %v", d, bound)
			} else {
				t.Logf("Lost fired %v after pg_terminate_backend (keepalive %v)", d.Round(time.Millisecond), lossKeepalive)
			}
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
		if err := lk.Unlock(ctx); !errors.Is(err, advisory.ErrLost) {
			t.Fatalf("Unlock of a lost lock: %v, want ErrLost", err)
		}
		mustUnlock(t, w)
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
		bound := lossBound(db)
		var killed time.Time
		var took time.Duration
		var cause error
		err := l.Do(ctx, key, func(ctx context.Context) error {
			pids := holderPIDs(t, conn, key)
			if len(pids) != 1 {
				t.Errorf("%d holders inside Do", len(pids))
				return nil
			}
			killed = time.Now()
			if err := db.Cluster.TerminateBackend(ctx, pids[0]); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				took = time.Since(killed)
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
		if took > bound {
			t.Fatalf("Do's context ended %v after the kill; the bound is %v", took, bound)
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
	lockers := map[string]*advisory.Locker{
		"sql-pgx": advisory.New(db.OpenSQL(), advisory.WithKeepalive(lossKeepalive), advisory.WithWaitTimeout(2*time.Second)),
		"pgxpool": advisory.NewPool(pgxPoolWith(t, db, 16), advisory.WithKeepalive(lossKeepalive),
			advisory.WithWaitTimeout(2*time.Second)),
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
						err = lk.Unlock(ctx)
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
		if err := lk.Unlock(ctx); !errors.Is(err, advisory.ErrLost) {
			t.Fatalf("%s: Unlock after the server stopped: %v, want ErrLost", name, err)
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
				err = lk.Unlock(ctx)
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
	// Four keepalive intervals, widened by the latency measured now, so
	// that a check delayed by a busy machine is not taken for idleness.
	idle := 400*time.Millisecond + 40*db.Latency()
	db.Exec(fmt.Sprintf("ALTER DATABASE %s SET idle_session_timeout = '%dms'", db.Name, idle.Milliseconds()))
	ctx := context.Background()
	l := advisory.NewPool(pgxPoolWith(t, db, 4), advisory.WithKeepalive(100*time.Millisecond))
	lk := mustLock(t)(l.Lock(ctx, advisory.KeyOf("idle")))
	select {
	case <-lk.Lost():
		t.Fatalf("lost while idle despite the keepalive: %v", lk.Err())
	case <-time.After(3 * idle): // well past the idle timeout
	}
	mustUnlock(t, lk)
}

// TestUnlockFindsLoss: with no keepalive check in between, Unlock itself
// finds the session gone: ErrLost, Lost closed, the dead connection
// destroyed rather than pooled.
func TestUnlockFindsLoss(t *testing.T) {
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
		if err := lk.Unlock(ctx); !errors.Is(err, advisory.ErrLost) {
			t.Fatalf("Unlock on a terminated session: %v, want ErrLost", err)
		}
		select {
		case <-lk.Lost():
		default:
			t.Fatal("Lost not closed after Unlock found the session gone")
		}
		if n := rec.Outcomes()[observe.Lost]; n != 1 {
			t.Fatalf("%d Lost events, want 1", n)
		}
		// The pool did not keep the dead connection: the next lock works.
		mustUnlock(t, mustLock(t)(l.TryLock(ctx, key)))
	})
}
