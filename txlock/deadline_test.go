package txlock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
)

// backendPID runs one locked transaction on be and returns the server
// backend it ran on.
func backendPID(t *testing.T, be backend, key advisory.Key) int64 {
	t.Helper()
	var pid int64
	err := be.do(context.Background(), []advisory.Key{key}, func(ctx context.Context, x q) error {
		var err error
		pid, err = x.Int(ctx, "SELECT pg_backend_pid()::int8")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// A wait whose bound the caller's deadline sets ends on the server
// (lock_timeout, SQLSTATE 55P03): the caller gets an error matching
// ErrTimeout and context.DeadlineExceeded with one Timeout event, it is not
// retried even under RetryLockTimeout, and the connection survives — the
// next transaction runs on the same server backend (one connection in use
// at a time, so every handle hands back the one it has). Only what holds at
// any speed is asserted: when a stall before the wait used up the time to
// the deadline, nothing is sent and the answer is the same typed timeout
// without the server's error. That the answer comes before the deadline,
// and with what kept back, is TestDeadlineBoundWaitAnswersBeforeTheDeadline
// (internal/lockedtx), where time is exact.
func TestDeadlineEndsWaitOnServerAndKeepsConnection(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	key := advisory.KeyOf("deadline:server")
	other := advisory.KeyOf("deadline:other")
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			before := backendPID(t, be, other)
			h := holdLocks(t, db, false, key)
			defer h.release()
			var evs observetest.Recorder
			const deadline = time.Second
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			ran := false
			err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { ran = true; return nil },
				txlock.WithTimeout(time.Hour), txlock.WithObserver(&evs), txlock.WithRetry(retry.RetryLockTimeout()))
			var le *lockedtx.LockError
			if !errors.As(err, &le) || !errors.Is(err, txlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || ran {
				t.Fatalf("got %v (fn ran: %v), want an error matching ErrTimeout and context.DeadlineExceeded", err, ran)
			}
			switch {
			case le.Err == nil:
				t.Logf("a stall used up the time to the deadline before the wait: nothing sent (%v)", err)
			case retry.SQLState(err) != "55P03":
				t.Fatalf("got %v, want the server's lock_timeout (55P03) to have ended the wait", err)
			case le.Timeout <= 0 || le.Timeout >= deadline:
				t.Fatalf("wait bound %v, want one shorter than the deadline %v", le.Timeout, deadline)
			}
			if n := evs.Count(observe.Retry, observe.OutcomeNone); n != 0 {
				t.Fatalf("retried %d times: %+v", n, evs.Events())
			}
			if evs.Count(observe.LockAcquire, observe.Timeout) != 1 {
				t.Fatalf("events: %+v", evs.Events())
			}
			h.release()
			if after := backendPID(t, be, other); after != before {
				t.Fatalf("the transaction ran on backend %d before the timed-out wait and on %d after: the connection was replaced", before, after)
			}
		})
	}
}

// When the caller's deadline leaves no time to wait, the call returns the
// typed timeout at once — an error matching ErrTimeout and
// context.DeadlineExceeded with no server error, as nothing was sent —
// and fn does not run.
func TestDeadlineTooCloseReturnsTimeoutAtOnce(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	key := advisory.KeyOf("deadline:close")
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			var evs observetest.Recorder
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(500*time.Microsecond))
			defer cancel()
			ran := false
			err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { ran = true; return nil },
				txlock.WithObserver(&evs))
			var le *lockedtx.LockError
			if ctx.Err() != nil && !errors.As(err, &le) {
				// The machine was slower than half a millisecond before
				// the first check: the context had already ended.
				if !errors.Is(err, context.DeadlineExceeded) || ran {
					t.Fatalf("got %v (fn ran: %v)", err, ran)
				}
				return
			}
			if !errors.As(err, &le) || !errors.Is(err, txlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || ran {
				t.Fatalf("got %v (fn ran: %v), want an error matching ErrTimeout and context.DeadlineExceeded", err, ran)
			}
			if le.Err != nil {
				t.Fatalf("got %v: a server error, want nothing sent", err)
			}
			if evs.Count(observe.LockAcquire, observe.Timeout) != 1 {
				t.Fatalf("events: %+v", evs.Events())
			}
		})
	}
}

// A cancellation still ends a wait whose bound the deadline set: the call
// returns context.Canceled, the hour-long deadline far off (that it does
// so at once is TestCancelEndsDeadlineBoundWaitAtOnce, internal/lockedtx).
func TestCancelEndsDeadlineBoundWait(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	admin := db.Pool()
	key := advisory.KeyOf("deadline:cancel")
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			h := holdLocks(t, db, false, key)
			defer h.release()
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { return nil },
					txlock.WithTimeout(2*time.Hour))
			}()
			for len(advisoryLocks(t, admin)) < 2 { // the holder's and the waiter's
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			h.release()
			waitNoLocks(t, admin)
		})
	}
}

// A connection's first deadline-bound wait over a slow network keeps the
// round trips it measured back. The round trips before the wait's bound is
// fixed come out of the time to the deadline, not out of what is kept back
// for COMMIT; and the first of them was measured — on pgx (and OpenDB) the
// prepare of BEGIN's batch (two round trips), on other database/sql
// handles BEGIN sent alone (one) — so that, though no hold has been seen,
// the wait keeps 3.5 of them back, not only the cold reserve (50 ms).
// Through a proxy that delays each direction by oneWay, the bound is at
// most the deadline less the delays before it and 7 more (the reserve):
// that holds at any machine speed, a slower machine only lowers it. The
// answer is the typed timeout: the server's 55P03, or, when a stall used up
// the time before the wait, nothing sent. That the 55P03 comes before the
// deadline is TestDeadlineBoundWaitAnswersBeforeTheDeadline
// (internal/lockedtx), where time is exact.
func TestFirstDeadlineWaitOverASlowNetworkKeepsRoundTripsBack(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	const oneWay = 100 * time.Millisecond
	p := pgtest.StartSlowProxy(t, db.DSN, oneWay)
	key := advisory.KeyOf("deadline:prepare")
	cfg, err := pgx.ParseConfig(p.DSN)
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context) error { return errors.New("fn ran: the lock is held elsewhere") }
	// Each case opens its connection before the call, then calls.
	type call func(ctx context.Context, opts ...txlock.Option) error
	sqlCall := func(h *sql.DB) call {
		t.Cleanup(func() { h.Close() })
		h.SetMaxOpenConns(1)
		if err := h.PingContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context, opts ...txlock.Option) error {
			return txlock.Do(ctx, h, key, func(ctx context.Context, _ *sql.Tx) error { return fn(ctx) }, opts...)
		}
	}
	for _, c := range []struct {
		name   string
		before int // one-way delays before the bound is fixed
		open   func() call
	}{
		{"pgx", 4, func() call {
			conn, err := pgx.Connect(context.Background(), p.DSN)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close(context.Background()) })
			return func(ctx context.Context, opts ...txlock.Option) error {
				return txlock.DoPgx(ctx, conn, key, func(ctx context.Context, _ pgx.Tx) error { return fn(ctx) }, opts...)
			}
		}},
		{"OpenDB", 4, func() call { return sqlCall(txlock.OpenDB(*cfg)) }},
		{"database/sql (pgx)", 2, func() call { return sqlCall(stdlib.OpenDB(*cfg)) }},
		{"lib/pq", 2, func() call {
			h, err := sql.Open("postgres", p.DSN)
			if err != nil {
				t.Fatal(err)
			}
			return sqlCall(h)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := holdLocks(t, db, false, key)
			defer h.release()
			do := c.open()
			const deadline = 3 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			err := do(ctx, txlock.WithTimeout(time.Hour))
			var le *lockedtx.LockError
			if !errors.As(err, &le) || !le.ByDeadline || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want the typed timeout of the deadline", err)
			}
			if le.Err == nil {
				t.Logf("a stall used up the time to the deadline before the wait: nothing sent (%v)", err)
				return
			}
			if retry.SQLState(err) != "55P03" {
				t.Fatalf("got %v, want the server's lock_timeout (55P03) to have ended the wait", err)
			}
			if most := deadline - time.Duration(c.before)*oneWay - 7*oneWay; le.Timeout > most {
				t.Fatalf("wait bound %v: more than %v, the deadline less %d one-way delays before it and 3.5 round trips kept back", le.Timeout, most, c.before)
			}
			t.Logf("wait bound %v for a deadline of %v", le.Timeout, deadline)
		})
	}
}

// A connection's estimates follow the network back down even when none of
// its waits is granted (no COMMIT to measure): the ROLLBACK after a
// timed-out wait is measured too. A first wait 100 ms from the server
// keeps 3.5 of those round trips back; the network then turns fast; the
// next timed-out wait still keeps them back (nothing fast was measured
// yet) — a bound of at most the deadline less 700 ms, at any machine speed
// (a slower machine only lowers it) — and its fast ROLLBACK lowers the
// estimate for the wait after it, whose bound is logged: how far it rises
// depends on how fast the loopback ROLLBACK was, which a busy machine
// decides (the decaying minimum itself is TestEstimatesDecay and
// TestReserveFollowsTheEstimates, internal/waitbound).
func TestEstimatesFollowTheNetworkWhenNoWaitIsGranted(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	const oneWay = 100 * time.Millisecond
	p := pgtest.StartSlowProxy(t, db.DSN, oneWay)
	key := advisory.KeyOf("deadline:estimates")
	h := holdLocks(t, db, false, key)
	defer h.release()
	conn, err := pgx.Connect(context.Background(), p.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const deadline = 1500 * time.Millisecond
	wait := func() time.Duration {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		err := txlock.DoPgx(ctx, conn, key, func(context.Context, pgx.Tx) error {
			return errors.New("fn ran: the lock is held elsewhere")
		}, txlock.WithTimeout(time.Hour))
		var le *lockedtx.LockError
		if !errors.As(err, &le) || !le.ByDeadline || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the typed timeout of the deadline", err)
		}
		if le.Err != nil && retry.SQLState(err) != "55P03" {
			t.Fatalf("got %v, want the server's lock_timeout (55P03) to have ended the wait", err)
		}
		return le.Timeout
	}
	slow := wait()
	if err := p.SetDelay(pgtest.BothWays, 0, 0); err != nil {
		t.Fatal(err)
	}
	stale := wait()
	if most := deadline - 7*oneWay; stale > most {
		t.Fatalf("bound %v after one slow ROLLBACK: more than %v, the deadline less the 3.5 slow round trips measured", stale, most)
	}
	fresh := wait()
	t.Logf("bounds for a %v deadline: %v at 100 ms each way, then on loopback %v (slow estimates), %v (after a fast ROLLBACK)",
		deadline, slow, stale, fresh)
}
