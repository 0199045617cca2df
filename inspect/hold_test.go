package inspect_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/inspect"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// stateChange is pg_stat_activity.state_change of pid: when its last
// statement ended (it is idle).
func stateChange(t *testing.T, probe *pgx.Conn, pid int) time.Time {
	t.Helper()
	var at time.Time
	if err := probe.QueryRow(context.Background(),
		"SELECT state_change FROM pg_stat_activity WHERE pid = $1", pid).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// failedTry runs try on conn, which must answer false, until the server
// shows that statement ending after the instant after (the clock is in
// microseconds): the hold of what conn took before it began before the try.
func failedTry(t *testing.T, probe, conn *pgx.Conn, after time.Time, try string, args ...any) {
	t.Helper()
	for {
		var got bool
		if err := conn.QueryRow(context.Background(), try, args...).Scan(&got); err != nil || got {
			t.Fatalf("%s: %t %v, want a failed try", try, got, err)
		}
		if stateChange(t, probe, pid(conn)).After(after) {
			return
		}
	}
}

// holdOf is the snapshot's one row for key.
func holdOf(t *testing.T, snap *inspect.Snapshot, key advisory.Key) inspect.Lock {
	t.Helper()
	ls := locksOf(snap, key)
	if len(ls) != 1 || !ls[0].Granted {
		t.Fatalf("want one holder of %v: %+v", key, snap.Locks)
	}
	return ls[0]
}

// A session that holds one lock and then fails to take another — a
// multiplexed connection's next try, a transaction's try of a second key —
// has the failed try as its last statement: the hold is not known, and is
// reported as an upper bound that covers it (at least since the statement
// that took it ended, by the server's clock), never as exact from the try.
func TestHoldAfterAFailedTryOfAnotherKeyIsABound(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	probe := session(t, db, "probe")
	k1, k2 := advisory.KeyOf("hold:taken"), advisory.KeyOf("hold:busy")
	if _, err := session(t, db, "other").Exec(ctx, "SELECT pg_advisory_lock($1)", keyArg(k2)); err != nil {
		t.Fatal(err)
	}
	for _, try := range []struct{ name, sql string }{
		{"bind parameter", "SELECT pg_try_advisory_lock($1)"},
		{"literal", fmt.Sprintf("SELECT pg_try_advisory_lock(%d)", keyArg(k2))},
	} {
		t.Run(try.name, func(t *testing.T) {
			conn := session(t, db, "holder")
			if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_advisory_lock(%d)", keyArg(k1))); err != nil {
				t.Fatal(err)
			}
			took := stateChange(t, probe, pid(conn))
			if try.name == "literal" {
				failedTry(t, probe, conn, took, try.sql)
			} else {
				failedTry(t, probe, conn, took, try.sql, keyArg(k2))
			}
			snap, err := inspect.Take(ctx, db.SQL())
			if err != nil {
				t.Fatal(err)
			}
			h := holdOf(t, snap, k1)
			if !h.AtMost || h.For < snap.At.Sub(took) || h.For != snap.At.Sub(h.Session.BackendStart) {
				t.Errorf("after a failed try of another key: For %v AtMost %t; held at least %v (since the lock statement ended), the session began %v before",
					h.For, h.AtMost, snap.At.Sub(took), snap.At.Sub(h.Session.BackendStart))
			}
		})
	}

	// A txlock transaction holds k1 and tries k2 inside fn: a bound since
	// the transaction began.
	t.Run("txlock", func(t *testing.T) {
		err := txlock.Do(ctx, db.SQL(), k1, func(ctx context.Context, tx *sql.Tx) error {
			var got bool
			if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", keyArg(k2)).Scan(&got); err != nil || got {
				return fmt.Errorf("try of the busy key: %t %v", got, err)
			}
			snap, err := inspect.Take(ctx, db.SQL())
			if err != nil {
				return err
			}
			h := holdOf(t, snap, k1)
			if h.Scope != inspect.ScopeTransaction || !h.AtMost || h.Session.XactStart.IsZero() ||
				h.For != snap.At.Sub(h.Session.XactStart) {
				t.Errorf("txlock's lock after a failed try: %+v, want a bound since the transaction began (%v)",
					h, snap.At.Sub(h.Session.XactStart))
			}
			return nil
		}, txlock.WithoutRetry())
		if err != nil {
			t.Fatal(err)
		}
	})

	// A multiplexed Locker: the failed TryLock of k2 rides on the
	// connection that holds k1.
	t.Run("multiplexed", func(t *testing.T) {
		l := advisory.New(db.OpenSQL(), advisory.WithMultiplexing(1), advisory.WithKeepalive(time.Hour))
		held, err := l.TryLock(ctx, k1)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(ctx)
		snap, err := inspect.Take(ctx, db.SQL())
		if err != nil {
			t.Fatal(err)
		}
		holder := holdOf(t, snap, k1).Session.PID
		took := stateChange(t, probe, holder)
		if _, err := l.TryLock(ctx, k2); !errors.Is(err, sqlock.ErrNotAcquired) {
			t.Fatalf("TryLock of the busy key: %v", err)
		}
		if !stateChange(t, probe, holder).After(took) {
			t.Fatalf("the failed TryLock did not run on pid %d, the set's one connection", holder)
		}
		if snap, err = inspect.Take(ctx, db.SQL()); err != nil {
			t.Fatal(err)
		}
		if h := holdOf(t, snap, k1); !h.AtMost || h.For < snap.At.Sub(took) {
			t.Errorf("multiplexed hold after a failed TryLock: For %v AtMost %t, held at least %v",
				h.For, h.AtMost, snap.At.Sub(took))
		}
	})
}

// A hold is exact when the session's last statement names the key in its
// last lock call and has ended: held since it ended, to the microsecond the
// server recorded. A call naming it earlier in the statement gives a bound
// since the statement began; a bind parameter gives none.
func TestHoldIsExactOnlyWhenTheStatementNamesTheKey(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	probe := session(t, db, "probe")
	conn := session(t, db, "holder")
	k1, k2, k3 := advisory.KeyOf("named:first"), advisory.KeyOf("named:second"), advisory.KeyPair(3, -4)
	take := func() *inspect.Snapshot {
		t.Helper()
		snap, err := inspect.Take(ctx, db.SQL())
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}

	// The only lock, its key a bind parameter: a bound.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", keyArg(k1)); err != nil {
		t.Fatal(err)
	}
	if h := holdOf(t, take(), k1); !h.AtMost {
		t.Errorf("key as a bind parameter: %+v, want a bound", h)
	}
	conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")

	// Two calls in one statement: the last is exact, the earlier one a
	// bound since the statement began.
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_advisory_lock(%d), pg_catalog.pg_advisory_lock(%d)", keyArg(k1), keyArg(k2))); err != nil {
		t.Fatal(err)
	}
	ended := stateChange(t, probe, pid(conn))
	snap := take()
	if h := holdOf(t, snap, k2); h.AtMost || h.For != snap.At.Sub(ended) {
		t.Errorf("the statement's last lock call: For %v AtMost %t, want exactly %v", h.For, h.AtMost, snap.At.Sub(ended))
	}
	if h := holdOf(t, snap, k1); !h.AtMost || h.For < snap.At.Sub(ended) {
		t.Errorf("an earlier lock call of the statement: For %v AtMost %t, want a bound ≥ %v", h.For, h.AtMost, snap.At.Sub(ended))
	}

	// A pair key, named: exact; a call after it (another statement of the
	// batch) makes it a bound.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(3, -4)"); err != nil {
		t.Fatal(err)
	}
	ended = stateChange(t, probe, pid(conn))
	snap = take()
	if h := holdOf(t, snap, k3); h.AtMost || h.For != snap.At.Sub(ended) {
		t.Errorf("pair key named: For %v AtMost %t, want exactly %v", h.For, h.AtMost, snap.At.Sub(ended))
	}
	if h := holdOf(t, snap, k1); !h.AtMost {
		t.Errorf("a key the last statement does not name: %+v", h)
	}
	conn.Exec(ctx, "SELECT pg_advisory_unlock(3, -4)")
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(3, -4); SELECT pg_sleep(0)"); err != nil {
		t.Fatal(err)
	}
	if h := holdOf(t, take(), k3); !h.AtMost {
		t.Errorf("work after the lock call: %+v, want a bound", h)
	}

	// A shared call naming the key does not make its exclusive hold exact
	// (the session now holds both modes: two rows).
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_try_advisory_lock_shared(%d)", keyArg(k2))); err != nil {
		t.Fatal(err)
	}
	ended = stateChange(t, probe, pid(conn))
	snap = take()
	for _, h := range locksOf(snap, k2) {
		if h.Shared && (h.AtMost || h.For != snap.At.Sub(ended)) || !h.Shared && !h.AtMost {
			t.Errorf("shared call on an exclusively held key: %+v", h)
		}
	}
	// An unlock names the key but takes nothing: k1, taken twice (the
	// second time named), unlocked once, is still held, by a bound.
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_advisory_lock(%d)", keyArg(k1))); err != nil {
		t.Fatal(err)
	}
	if h := holdOf(t, take(), k1); h.AtMost {
		t.Errorf("re-taken, named: %+v", h)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_advisory_unlock(%d)", keyArg(k1))); err != nil {
		t.Fatal(err)
	}
	if h := holdOf(t, take(), k1); !h.AtMost {
		t.Errorf("after an unlock naming it: %+v", h)
	}
}
