package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// lockPID takes key with l, returns the server backend holding it, and
// unlocks.
func lockPID(t *testing.T, l *advisory.Locker, conn *pgx.Conn, key advisory.Key) uint32 {
	t.Helper()
	lk, err := l.Lock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(context.Background())
	pids := holderPIDs(t, conn, key)
	if len(pids) != 1 {
		t.Fatalf("holders of %v: %v", key, pids)
	}
	return pids[0]
}

// A wait whose bound the caller's deadline sets ends on the server
// (lock_timeout) before the deadline: the caller gets ErrTimeout matching
// context.DeadlineExceeded, and the connection survives — the Locker's next
// lock is held by the same server backend (one connection in use at a
// time, so the pool hands back the one it has).
func TestDeadlineEndsWaitOnServerAndKeepsConnection(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		conn := admin(t, db)
		l := bc.open(t, db)
		if err := l.Verify(context.Background()); err != nil { // the probe's connections are closed
			t.Fatal(err)
		}
		key, other := advisory.KeyOf("deadline:server:"+bc.name), advisory.KeyOf("deadline:other:"+bc.name)
		before := lockPID(t, l, conn, other)
		k, _ := key.Int64()
		if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_lock($1)", k); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		lk, err := l.Lock(ctx, key)
		if err == nil {
			lk.Release(context.Background())
			t.Fatal("Lock of a held key succeeded")
		}
		if !errors.Is(err, advisory.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrTimeout matching context.DeadlineExceeded", err)
		}
		if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", k); err != nil {
			t.Fatal(err)
		}
		if after := lockPID(t, l, conn, other); after != before {
			t.Fatalf("held by backend %d before the timed-out wait and by %d after: the connection was replaced", before, after)
		}
	})
}

// When the caller's deadline leaves no time to wait, Lock returns
// ErrTimeout matching context.DeadlineExceeded at once, holding nothing.
func TestDeadlineTooCloseReturnsTimeoutAtOnce(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		l := bc.open(t, db)
		if err := l.Verify(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(500*time.Microsecond))
		defer cancel()
		lk, err := l.Lock(ctx, advisory.KeyOf("deadline:close"))
		if err == nil {
			lk.Release(context.Background())
			t.Fatal("Lock succeeded with no time to wait")
		}
		if !errors.Is(err, advisory.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrTimeout matching context.DeadlineExceeded", err)
		}
		waitNoLocks(t, admin(t, db))
	})
}

// A cancellation still ends a wait whose bound the deadline set, at once.
func TestCancelEndsDeadlineBoundWait(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		conn := admin(t, db)
		l := bc.open(t, db, advisory.WithTimeout(2*time.Hour))
		key := advisory.KeyOf("deadline:cancel:" + bc.name)
		k, _ := key.Int64()
		if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_lock($1)", k); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			lk, err := l.Lock(ctx, key)
			if err == nil {
				lk.Release(context.Background())
			}
			done <- err
		}()
		waitUntil(t, "the Lock waits on the server", func() bool { return waiting(t, conn, key) == 1 })
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("a cancelled wait did not end within a minute")
		}
		if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", k); err != nil {
			t.Fatal(err)
		}
		waitNoLocks(t, conn)
	})
}

// A fresh Locker's first deadline-bound wait, 100 ms from the server
// (through a proxy that delays each way by that much, so every round trip
// the probe measured took at least 200 ms): the lock_timeout it sends,
// read from pg_stat_activity while it waits, keeps at least 3.5 of those
// round trips back from the 3 s deadline (not only the cold reserve,
// 50 ms, with which the 55P03 came after the deadline), and the wait ends
// with ErrTimeout matching context.DeadlineExceeded. Whether the answer
// then arrives before the deadline depends on this machine's speed; the
// reserve that makes it do so is TestDeadlineWaitKeepsTheMeasuredRoundTripsBack,
// exact under synctest.
func TestFirstDeadlineWaitOverASlowNetworkAnswersInTime(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	const oneWay = 100 * time.Millisecond
	p := pgtest.StartSlowProxy(t, db.DSN, oneWay)
	conn := admin(t, db)
	for _, c := range []struct {
		name string
		open func() *advisory.Locker
	}{
		{"pgxpool", func() *advisory.Locker {
			pool, err := pgxpool.New(context.Background(), p.DSN)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			return advisory.NewPool(pool)
		}},
		{"sql-pgx", func() *advisory.Locker {
			h, err := sql.Open("pgx", p.DSN)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			return advisory.New(h)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := advisory.KeyOf("deadline:slow-network:" + c.name)
			k, _ := key.Int64()
			if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_lock($1)", k); err != nil {
				t.Fatal(err)
			}
			defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", k)
			l := c.open()
			if err := l.Verify(context.Background()); err != nil {
				t.Fatal(err)
			}
			const deadline = 3 * time.Second
			got := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				lk, err := l.Lock(ctx, key)
				if err == nil {
					lk.Release(context.Background())
				}
				got <- err
			}()
			if queued, err := waitQueued(t, conn, key, got); queued {
				var query string
				if err := conn.QueryRow(context.Background(), `SELECT a.query FROM pg_stat_activity a
					JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND NOT l.granted
					WHERE a.datname = current_database()`).Scan(&query); err != nil {
					t.Fatal(err)
				}
				m := regexp.MustCompile(`lock_timeout = (\d+);`).FindStringSubmatch(query)
				if m == nil {
					t.Fatalf("the waiting statement %q sets no lock_timeout", query)
				}
				ms, _ := strconv.Atoi(m[1])
				if kept := deadline - time.Duration(ms)*time.Millisecond; kept < 7*(2*oneWay)/2 {
					t.Fatalf("lock_timeout = %dms under a %v deadline keeps %v back, want at least 3.5 round trips of at least %v", ms, deadline, kept, 2*oneWay)
				}
			} else {
				got <- err // it ended before the poll saw it wait: checked below
			}
			if err := <-got; !errors.Is(err, advisory.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want ErrTimeout matching context.DeadlineExceeded", err)
			}
		})
	}
}
