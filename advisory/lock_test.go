package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
)

// mustLock(t)(l.Lock(ctx, key)) fails the test on error.
func mustLock(t testing.TB) func(*advisory.Lock, error) *advisory.Lock {
	return func(lk *advisory.Lock, err error) *advisory.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return lk
	}
}

func mustRelease(t testing.TB, lk *advisory.Lock) {
	t.Helper()
	if err := lk.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestLockRelease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		a, b := bc.open(t, db), bc.open(t, db)
		conn := admin(t, db)
		key := advisory.KeyOf("order-1")

		lk := mustLock(t)(a.Lock(ctx, key))
		if lk.Key() != key || lk.Shared() {
			t.Fatalf("lock reports key %v shared %v", lk.Key(), lk.Shared())
		}
		if pids := holderPIDs(t, conn, key); len(pids) != 1 {
			t.Fatalf("pg_locks shows %d holders of %v, want 1", len(pids), key)
		}
		if _, err := b.TryLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
			t.Fatalf("TryLock of a held key from another Locker: %v, want ErrNotAcquired", err)
		}
		// Another goroutine of the same Locker gets its own session: no
		// free ride on the holder's.
		if _, err := a.TryLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
			t.Fatalf("TryLock of a held key from the same Locker: %v, want ErrNotAcquired", err)
		}
		if lk.Err() != nil {
			t.Fatalf("Err of a held lock: %v", lk.Err())
		}
		mustRelease(t, lk)
		if err := lk.Release(ctx); !errors.Is(err, advisory.ErrNotHeld) {
			t.Fatalf("second Release: %v, want ErrNotHeld", err)
		}
		select {
		case <-lk.Lost():
			t.Fatal("Lost closed by a normal Release")
		default:
		}
		lk2 := mustLock(t)(b.TryLock(ctx, key))
		mustRelease(t, lk2)
		if n := advisoryLocks(t, conn); n != 0 {
			t.Fatalf("%d advisory locks left after Release", n)
		}
	})
}

func TestWaitTimeoutDeadlineCancel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		holder := bc.open(t, db)
		l := bc.open(t, db, advisory.WithTimeout(300*time.Millisecond))
		conn := admin(t, db)
		key := advisory.KeyInt(42)
		lk := mustLock(t)(holder.Lock(ctx, key))

		_, err := l.Lock(ctx, key)
		if !errors.Is(err, advisory.ErrTimeout) || errors.Is(err, advisory.ErrNotAcquired) ||
			errors.Is(err, advisory.ErrDeadlock) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock of a held key with a 300ms wait: %v, want ErrTimeout only", err)
		}
		var e *advisory.Error
		if !errors.As(err, &e) || e.Op != "lock" || e.Key != key {
			t.Fatalf("error %#v is not an *advisory.Error for lock %v", err, key)
		}

		dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = bc.open(t, db).Lock(dctx, key) // default 5 s wait: the context's deadline comes first
		cancel()
		if !errors.Is(err, advisory.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock with a 200ms context deadline: %v, want ErrTimeout and context.DeadlineExceeded", err)
		}

		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := bc.open(t, db).Lock(cctx, key)
			done <- err
		}()
		waitUntil(t, "the waiter queues", func() bool { return waiting(t, conn, key) == 1 })
		cancel()
		err = <-done
		if !errors.Is(err, context.Canceled) || errors.Is(err, advisory.ErrTimeout) {
			t.Fatalf("Lock cancelled while waiting: %v, want context.Canceled", err)
		}

		// A waiter gets the lock when the holder lets go.
		got := make(chan *advisory.Lock, 1)
		go func() {
			lk, err := bc.open(t, db, advisory.WithTimeout(time.Minute)).Lock(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- lk
		}()
		waitUntil(t, "the waiter queues", func() bool { return waiting(t, conn, key) == 1 })
		mustRelease(t, lk)
		if lk2 := <-got; lk2 != nil {
			mustRelease(t, lk2)
		}
		waitNoLocks(t, conn)
	})
}

// TestTimeoutSettingsNotLeft: the wait's lock_timeout and statement_timeout
// are statement-scoped. The session's own values (set on the only pooled
// connection) are the same after a granted lock, a timed-out one and a
// try-lock; and a session whose defaults are short does not cut the wait
// short.
func TestTimeoutSettingsNotLeft(t *testing.T) {
	type pool struct {
		locker func(opts ...advisory.Option) *advisory.Locker
		exec   func(string) error
		show   func(string) string
	}
	setups := map[string]func(t *testing.T, db *pgtest.DB) pool{
		"sql-pgx": func(t *testing.T, db *pgtest.DB) pool {
			sdb := db.OpenSQL()
			sdb.SetMaxOpenConns(1)
			return pool{
				locker: func(opts ...advisory.Option) *advisory.Locker { return advisory.New(sdb, opts...) },
				exec:   func(q string) error { _, err := sdb.Exec(q); return err },
				show: func(name string) string {
					var v string
					if err := sdb.QueryRow("SHOW " + name).Scan(&v); err != nil {
						t.Fatal(err)
					}
					return v
				},
			}
		},
		"pgxpool": func(t *testing.T, db *pgtest.DB) pool {
			p := pgxPoolWith(t, db, 1)
			return pool{
				locker: func(opts ...advisory.Option) *advisory.Locker { return advisory.NewPool(p, opts...) },
				exec:   func(q string) error { _, err := p.Exec(context.Background(), q); return err },
				show: func(name string) string {
					var v string
					if err := p.QueryRow(context.Background(), "SHOW "+name).Scan(&v); err != nil {
						t.Fatal(err)
					}
					return v
				},
			}
		},
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			leakCheck(t)
			db := pgtest.New(t)
			ctx := context.Background()
			p := setup(t, db)
			l := p.locker()
			// A wait bounded by the Locker, so the server's lock_timeout
			// ends it (a context deadline may cancel the statement
			// client-side, which costs the connection and would hide what
			// this test looks at).
			short := p.locker(advisory.WithTimeout(300 * time.Millisecond))
			for _, l := range []*advisory.Locker{l, short} {
				if err := l.Verify(ctx); err != nil { // the probe closes its connections
					t.Fatal(err)
				}
			}
			if err := p.exec("SET lock_timeout = '7s'"); err != nil {
				t.Fatal(err)
			}
			if err := p.exec("SET statement_timeout = '9s'"); err != nil {
				t.Fatal(err)
			}
			check := func(after string) {
				t.Helper()
				if v := p.show("lock_timeout"); v != "7s" {
					t.Fatalf("after %s: lock_timeout = %s, want the session's 7s", after, v)
				}
				if v := p.show("statement_timeout"); v != "9s" {
					t.Fatalf("after %s: statement_timeout = %s, want the session's 9s", after, v)
				}
			}
			key := advisory.KeyOf("settings")
			mustRelease(t, mustLock(t)(l.Lock(ctx, key)))
			check("a granted Lock")
			mustRelease(t, mustLock(t)(l.RLock(ctx, key)))
			check("a granted RLock")
			mustRelease(t, mustLock(t)(l.TryLock(ctx, key)))
			check("a TryLock")

			conn := admin(t, db)
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", mustInt64(key)); err != nil {
				t.Fatal(err)
			}
			if _, err := short.Lock(ctx, key); !errors.Is(err, advisory.ErrTimeout) {
				t.Fatalf("Lock of a key held elsewhere: %v, want ErrTimeout", err)
			}
			check("a timed-out Lock")
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", mustInt64(key)); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("short session defaults", func(t *testing.T) {
		leakCheck(t)
		db := pgtest.New(t)
		db.Exec("ALTER DATABASE " + db.Name + " SET lock_timeout = '50ms'")
		db.Exec("ALTER DATABASE " + db.Name + " SET statement_timeout = '50ms'")
		ctx := context.Background()
		conn := admin(t, db)
		// The test's own session, which watches pg_locks, is not what is
		// tested: a busy machine may take longer than 50 ms to answer it.
		if _, err := conn.Exec(ctx, "SET statement_timeout = 0; SET lock_timeout = 0"); err != nil {
			t.Fatal(err)
		}
		key := advisory.KeyOf("short defaults")
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", mustInt64(key)); err != nil {
			t.Fatal(err)
		}
		for _, bc := range backends {
			l := bc.open(t, db, advisory.WithTimeout(time.Minute))
			var got chan error
			// Until the wait's own statement lifts them, the session's
			// 50 ms apply: beside CPU hogs a statement before it (the
			// first use's probe, say) can be cancelled by them (57014)
			// before anything waits. That is the server doing as it was
			// told, not the wait being cut, so such a call is tried again,
			// a few times; a wait cut by them fails every time.
			for attempt := 1; ; attempt++ {
				got = make(chan error, 1)
				go func() {
					lk, err := l.Lock(ctx, key)
					if err == nil {
						err = lk.Release(ctx)
					}
					got <- err
				}()
				queued, err := waitQueued(t, conn, key, got)
				if queued {
					break
				}
				if pgerror.Code(err) != pgerror.QueryCanceled || attempt == 5 {
					t.Fatalf("%s: Lock ended before it waited (attempt %d): %v", bc.name, attempt, err)
				}
				t.Logf("%s: a statement before the wait hit the session's statement_timeout: %v", bc.name, err)
			}
			// Well past both session defaults: the wait is governed by the
			// wait timeout alone.
			time.Sleep(300 * time.Millisecond)
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", mustInt64(key)); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("%s: Lock on a session with lock_timeout and statement_timeout of 50ms: %v", bc.name, err)
			}
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", mustInt64(key)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// waitQueued waits until one session waits for key (true), or the call
// reporting on got ends first (false, and its error).
func waitQueued(t *testing.T, conn *pgx.Conn, key advisory.Key, got <-chan error) (bool, error) {
	t.Helper()
	var err error
	ended := false
	waitUntil(t, "the waiter queues", func() bool {
		select {
		case err = <-got:
			ended = true
			return true
		default:
			return waiting(t, conn, key) == 1
		}
	})
	return !ended, err
}

func mustInt64(k advisory.Key) int64 {
	n, ok := k.Int64()
	if !ok {
		panic("not a bigint key")
	}
	return n
}

// TestDeadlock: a waiter the server picks as a deadlock victim gets
// ErrDeadlock, distinct from a timeout and from busy. Advisory locks of
// this package hold one key per connection, so to close a cycle the test
// leaks a lock onto the only pooled connection first.
func TestDeadlock(t *testing.T) {
	setups := map[string]func(t *testing.T, db *pgtest.DB) (*advisory.Locker, func(string)){
		"sql-pgx": func(t *testing.T, db *pgtest.DB) (*advisory.Locker, func(string)) {
			sdb := db.OpenSQL()
			sdb.SetMaxOpenConns(1)
			return advisory.New(sdb, advisory.WithTimeout(time.Minute)), func(q string) {
				if _, err := sdb.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
		},
		"pgxpool": func(t *testing.T, db *pgtest.DB) (*advisory.Locker, func(string)) {
			p := pgxPoolWith(t, db, 1)
			return advisory.NewPool(p, advisory.WithTimeout(time.Minute)), func(q string) {
				if _, err := p.Exec(context.Background(), q); err != nil {
					t.Fatal(err)
				}
			}
		},
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			leakCheck(t)
			db := pgtest.New(t)
			ctx := context.Background()
			l, exec := setup(t, db)
			if err := l.Verify(ctx); err != nil {
				t.Fatal(err)
			}
			a, b := advisory.KeyInt(1001), advisory.KeyInt(1002)
			exec("SELECT pg_advisory_lock(1001)") // leaked onto the pooled connection on purpose
			// The server checks a waiter for deadlock once, deadlock_timeout
			// after it starts waiting: ours must run after the other
			// session has closed the cycle, and before the other's.
			exec("SET deadlock_timeout = '1s'")
			other := admin(t, db)
			if _, err := other.Exec(ctx, "SET deadlock_timeout = '20s'"); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Exec(ctx, "SELECT pg_advisory_lock(1002)"); err != nil {
				t.Fatal(err)
			}
			res := make(chan error, 1)
			go func() {
				_, err := l.Lock(ctx, b) // runs on the connection holding a
				res <- err
			}()
			conn := admin(t, db)
			waitUntil(t, "the Locker waits for b", func() bool { return waiting(t, conn, b) == 1 })
			otherDone := make(chan error, 1)
			go func() {
				_, err := other.Exec(ctx, "SELECT pg_advisory_lock(1001)") // closes the cycle
				otherDone <- err
			}()
			err := <-res
			if !errors.Is(err, advisory.ErrDeadlock) || errors.Is(err, advisory.ErrTimeout) ||
				errors.Is(err, advisory.ErrNotAcquired) {
				t.Fatalf("Lock in a deadlock cycle: %v, want ErrDeadlock", err)
			}
			// The failed wait swept the connection (a lock granted at the
			// last moment must not stay): the leaked lock went with it, so
			// the other session gets a.
			if err := <-otherDone; err != nil {
				t.Fatal(err)
			}
			if _, err := other.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
				t.Fatal(err)
			}
			waitNoLocks(t, conn)
			_ = a
		})
	}
}

func TestReLock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		l := bc.open(t, db, advisory.WithTimeout(time.Minute))
		key, other := advisory.KeyOf("relock"), advisory.KeyOf("relock-other")
		ran := false
		err := l.Do(ctx, key, func(ctx context.Context) error {
			ran = true
			for name, f := range map[string]func(context.Context, advisory.Key) (*advisory.Lock, error){
				"Lock": l.Lock, "TryLock": l.TryLock, "RLock": l.RLock, "TryRLock": l.TryRLock,
			} {
				// (A wait would end in ErrTimeout after a minute.)
				if _, err := f(ctx, key); !errors.Is(err, advisory.ErrAlreadyHeld) {
					t.Errorf("%s of the key Do holds, with Do's context: %v, want ErrAlreadyHeld", name, err)
				}
			}
			if err := l.Do(ctx, key, func(context.Context) error { return nil }); !errors.Is(err, advisory.ErrAlreadyHeld) {
				t.Errorf("nested Do of the same key: %v, want ErrAlreadyHeld", err)
			}
			// Another key nests fine, and so does the same key from
			// another Locker (a separate holder: it is busy).
			if err := l.Do(ctx, other, func(context.Context) error { return nil }); err != nil {
				t.Errorf("nested Do of another key: %v", err)
			}
			if _, err := bc.open(t, db).TryLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
				t.Errorf("TryLock from another Locker: %v, want ErrNotAcquired", err)
			}
			return nil
		})
		if err != nil || !ran {
			t.Fatalf("Do: %v (ran %v)", err, ran)
		}
		// Shared holds are not re-entrant either: a shared re-request can
		// queue behind a waiting writer, which waits for the first hold.
		err = l.DoShared(ctx, key, func(ctx context.Context) error {
			if _, err := l.RLock(ctx, key); !errors.Is(err, advisory.ErrAlreadyHeld) {
				t.Errorf("RLock inside DoShared: %v, want ErrAlreadyHeld", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Lock.Context carries a hold too, and stops carrying it after
		// Release.
		lk := mustLock(t)(l.Lock(ctx, key))
		hctx, cancel := lk.Context(ctx)
		if _, err := l.TryLock(hctx, key); !errors.Is(err, advisory.ErrAlreadyHeld) {
			t.Fatalf("TryLock with the hold's context: %v, want ErrAlreadyHeld", err)
		}
		// Without the hold's context, a second request is another holder
		// asking: it waits, and the wait is bounded.
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancelShort()
		if _, err := l.Lock(short, key); !errors.Is(err, advisory.ErrTimeout) {
			t.Fatalf("second Lock of a held key without the hold's context: %v, want ErrTimeout", err)
		}
		mustRelease(t, lk)
		// If the client's deadline ended that wait before the server's
		// lock_timeout did (a busy machine), its connection was closed,
		// but the server notices only when the abandoned wait is granted,
		// just now: let that session end before taking the key again.
		conn := admin(t, db)
		waitUntil(t, "the key is free", func() bool { return len(holderPIDs(t, conn, key)) == 0 && waiting(t, conn, key) == 0 })
		lk2 := mustLock(t)(l.TryLock(hctx, key))
		cancel()
		mustRelease(t, lk2)
		waitNoLocks(t, conn)
	})
}

func TestBadInput(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := pgtest.New(t)
	sdb := db.OpenSQL()
	l := advisory.New(sdb)
	// A bad key is advisory's ErrInvalidKey and the shared
	// sqlock.ErrInvalidArgument, on the plain and the multiplexed Locker.
	invalid := func(err error) bool {
		return errors.Is(err, advisory.ErrInvalidKey) && errors.Is(err, sqlock.ErrInvalidArgument)
	}
	for lname, l := range map[string]*advisory.Locker{"plain": l, "multiplexed": advisory.New(sdb, advisory.WithMultiplexing(2))} {
		for _, k := range []advisory.Key{{}, advisory.KeyOf(""), advisory.KeyText("")} {
			for name, f := range map[string]func(context.Context, advisory.Key) (*advisory.Lock, error){
				"Lock": l.Lock, "TryLock": l.TryLock, "RLock": l.RLock, "TryRLock": l.TryRLock,
			} {
				if _, err := f(ctx, k); !invalid(err) {
					t.Errorf("%s: %s(%v): %v, want ErrInvalidKey and sqlock.ErrInvalidArgument", lname, name, k, err)
				}
			}
			if err := l.Do(ctx, k, func(context.Context) error { return nil }); !invalid(err) {
				t.Errorf("%s: Do(%v): %v, want ErrInvalidKey and sqlock.ErrInvalidArgument", lname, k, err)
			}
		}
		a := l.Acquirer()
		for name, f := range map[string]func(context.Context, string) (sqlock.Lock, error){"Acquire": a.Acquire, "TryAcquire": a.TryAcquire} {
			if lk, err := f(ctx, ""); !invalid(err) || lk != nil {
				t.Errorf("%s: Acquirer().%s(\"\"): %v, %v; want nil, ErrInvalidKey and sqlock.ErrInvalidArgument", lname, name, lk, err)
			}
		}
	}
	if err := l.Do(ctx, advisory.KeyInt(1), nil); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("Do with a nil function: %v, want ErrNilHandle", err)
	}
	if n := sdb.Stats().OpenConnections; n != 0 {
		t.Errorf("bad input opened %d connections; it must change nothing", n)
	}

	for name, l := range map[string]*advisory.Locker{
		"New(nil)":     advisory.New(nil),
		"NewPool(nil)": advisory.NewPool(nil),
	} {
		if _, err := l.Lock(ctx, advisory.KeyInt(1)); !errors.Is(err, sqlock.ErrNilHandle) {
			t.Errorf("%s: Lock: %v, want ErrNilHandle", name, err)
		}
		if err := l.Do(ctx, advisory.KeyInt(1), func(context.Context) error { return nil }); !errors.Is(err, sqlock.ErrNilHandle) {
			t.Errorf("%s: Do: %v, want ErrNilHandle", name, err)
		}
		if err := l.Verify(ctx); !errors.Is(err, sqlock.ErrNilHandle) {
			t.Errorf("%s: Verify: %v, want ErrNilHandle", name, err)
		}
	}
	for name, opt := range map[string]advisory.Option{
		"WithTimeout(0)":         advisory.WithTimeout(0),
		"WithTimeout(-1)":        advisory.WithTimeout(-1),
		"WithKeepalive(0)":       advisory.WithKeepalive(0),
		"WithReleaseTimeout(-1)": advisory.WithReleaseTimeout(-time.Second),
		"WithReleaseTimeout(0)":  advisory.WithReleaseTimeout(0),
		"WithKeepalive(-1)":      advisory.WithKeepalive(-1),
		"WithMultiplexing(0)":    advisory.WithMultiplexing(0),
		"WithMultiplexing(-1)":   advisory.WithMultiplexing(-1),
	} {
		l := advisory.New(sdb, opt)
		if _, err := l.TryLock(ctx, advisory.KeyInt(1)); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Errorf("%s: TryLock: %v, want ErrInvalidOption", name, err)
		}
	}
	// Nil observer and logger mean the defaults.
	l2 := advisory.New(sdb, advisory.WithObserver(nil), advisory.WithLogger(nil))
	mustRelease(t, mustLock(t)(l2.TryLock(ctx, advisory.KeyInt(1))))
	var nilLock *advisory.Lock
	if err := nilLock.Release(ctx); !errors.Is(err, advisory.ErrNotHeld) {
		t.Errorf("Release of a nil *Lock: %v, want ErrNotHeld", err)
	}
	// A context that is already done: nothing is attempted.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l2.Lock(done, advisory.KeyInt(2)); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled context: %v, want context.Canceled", err)
	}
}

// TestKeySpaces: each key form takes the lock SQL would take for it, and
// pg_locks shows it where Key.Locktag says.
func TestKeySpaces(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	ctx := context.Background()
	l := advisory.NewPool(db.OpenPool(nil))
	conn := admin(t, db)
	for _, tc := range []struct {
		key   advisory.Key
		probe string // SQL trying the same lock from another session
	}{
		{advisory.KeyOf("payment:order-123"), "SELECT pg_try_advisory_lock(hashtextextended('payment:order-123', 0))"},
		{advisory.KeyText("payment:order-123"), "SELECT pg_try_advisory_lock(hashtext('payment:order-123'))"},
		{advisory.KeyInt(-7), "SELECT pg_try_advisory_lock(-7)"},
		{advisory.KeyPair(-3, 9), "SELECT pg_try_advisory_lock(-3, 9)"},
	} {
		lk := mustLock(t)(l.Lock(ctx, tc.key))
		var got bool
		if err := conn.QueryRow(ctx, tc.probe).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got {
			t.Errorf("%v held, yet %s succeeded", tc.key, tc.probe)
		}
		if pids := holderPIDs(t, conn, tc.key); len(pids) != 1 {
			t.Errorf("%v: pg_locks shows %d holders at its locktag", tc.key, len(pids))
		}
		mustRelease(t, lk)
		if err := conn.QueryRow(ctx, tc.probe).Scan(&got); err != nil || !got {
			t.Fatalf("%v released, yet %s: %v %v", tc.key, tc.probe, got, err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
			t.Fatal(err)
		}
	}
	// The two key spaces are separate locks.
	a := mustLock(t)(l.Lock(ctx, advisory.KeyInt(1)))
	b := mustLock(t)(l.TryLock(ctx, advisory.KeyPair(0, 1)))
	mustRelease(t, a)
	mustRelease(t, b)
}

func TestShared(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		l := bc.open(t, db, advisory.WithTimeout(time.Minute))
		conn := admin(t, db)
		key := advisory.KeyOf("shared")
		const readers = 10
		var holding atomic.Int32
		var writerSawReaders atomic.Int32
		writerSawReaders.Store(-1)
		all := make(chan struct{})
		release := make(chan struct{})
		var releaseOnce sync.Once
		letGo := func() { releaseOnce.Do(func() { close(release) }) }
		var wg sync.WaitGroup
		defer wg.Wait()
		defer letGo() // on failure too, so that the readers unlock and the pools can close
		for i := 0; i < readers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lk, err := l.RLock(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				if holding.Add(1) == readers {
					close(all)
				}
				<-release
				holding.Add(-1)
				if err := lk.Release(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		select {
		case <-all: // all readers hold it at the same time
		case <-time.After(time.Minute):
			t.Fatal("readers did not all hold the shared lock at once")
		}
		if pids := holderPIDs(t, conn, key); len(pids) != readers {
			t.Fatalf("pg_locks shows %d holders, want %d readers", len(pids), readers)
		}
		if _, err := l.TryLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
			t.Fatalf("TryLock while readers hold: %v, want ErrNotAcquired", err)
		}
		if _, err := bc.open(t, db, advisory.WithTimeout(200*time.Millisecond)).Lock(ctx, key); !errors.Is(err, advisory.ErrTimeout) {
			t.Fatalf("Lock while readers hold: %v, want ErrTimeout", err)
		}
		lk2 := mustLock(t)(l.TryRLock(ctx, key))
		mustRelease(t, lk2)
		writer := make(chan *advisory.Lock, 1)
		go func() {
			lk, err := l.Lock(ctx, key)
			if err != nil {
				t.Error(err)
			}
			writerSawReaders.Store(holding.Load())
			writer <- lk
		}()
		waitUntil(t, "the writer queues", func() bool { return waiting(t, conn, key) == 1 })
		// A waiting writer blocks new readers (no writer starvation).
		if _, err := l.TryRLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
			t.Fatalf("TryRLock with a writer queued: %v, want ErrNotAcquired", err)
		}
		letGo()
		wg.Wait()
		wl := <-writer
		if n := writerSawReaders.Load(); n != 0 {
			t.Fatalf("writer got the lock while %d readers held it", n)
		}
		if _, err := l.TryRLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
			t.Fatalf("TryRLock while the writer holds: %v, want ErrNotAcquired", err)
		}
		mustRelease(t, wl)
		waitNoLocks(t, conn)
	})
}

func TestObserver(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	ctx := context.Background()
	var rec observetest.Recorder
	l := advisory.NewPool(db.OpenPool(nil), advisory.WithObserver(&rec))
	other := advisory.NewPool(db.OpenPool(nil))
	key := advisory.KeyInt(5)
	mustRelease(t, mustLock(t)(l.Lock(ctx, key)))
	lk := mustLock(t)(other.Lock(ctx, key))
	l.TryLock(ctx, key)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	l.Lock(short, key)
	cancelShort()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	l.Lock(cctx, key)
	mustRelease(t, lk)
	got := rec.Outcomes()
	want := map[observe.Outcome]int{observe.Acquired: 1, observe.Released: 1, observe.Busy: 1,
		observe.Timeout: 1, observe.Canceled: 1}
	for o, n := range want {
		if got[o] != n {
			t.Errorf("%v events: %d, want %d (all: %v)", o, got[o], n, got)
		}
	}
	for _, e := range rec.Events() {
		if e.Source != "advisory" || e.System != "postgresql" || e.Key != 5 {
			t.Errorf("event %+v: want source advisory, system postgresql, key 5", e)
		}
		if e.Kind == observe.LockRelease && e.Hold <= 0 {
			t.Errorf("release event without hold time: %+v", e)
		}
	}
}

type panicky struct{}

func (panicky) Observe(_ context.Context, e observe.Event) {
	if e.Outcome == observe.Acquired {
		panic("observer panics after the grant")
	}
}

// TestPanics: a panic between grant and hand-over, or inside Do's function,
// leaves no lock behind, already when the panic reaches the caller.
func TestPanics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)
		key := advisory.KeyOf("panic")
		l := bc.open(t, db, advisory.WithObserver(panicky{}))
		for _, f := range []func(context.Context, advisory.Key) (*advisory.Lock, error){l.Lock, l.TryLock} {
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("the observer's panic did not propagate")
					}
				}()
				f(ctx, key)
			}()
			// Released before the panic went on: at once, not once the
			// server notices a closed connection.
			if n := advisoryLocks(t, conn); n != 0 {
				t.Fatalf("%d advisory locks held right after the observer's panic", n)
			}
		}
		l2 := bc.open(t, db)
		func() {
			defer func() {
				if r := recover(); r != "inside Do" {
					t.Fatalf("recovered %v, want the function's panic", r)
				}
			}()
			l2.Do(ctx, key, func(context.Context) error { panic("inside Do") })
		}()
		if n := advisoryLocks(t, conn); n != 0 {
			t.Fatalf("%d advisory locks left after a panic in Do", n)
		}
		mustRelease(t, mustLock(t)(l2.TryLock(ctx, key)))
	})
}

// TestWaitForPooledConnection: the wait bound covers the wait for a pooled
// connection too. With the pool's only connection holding a lock, a second
// acquisition (any kind; a fresh Locker, whose first use waits for the
// pool in its probe; a multiplexed one) ends with ErrTimeout at the bound,
// and says what it waited for: ErrConnTimeout, "a connection from the
// pool", all of whose connections are in use — not the lock. One cancelled
// while it waits ends with context.Canceled, and once the lock is released
// the connection serves again.
func TestWaitForPooledConnection(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	ctx := context.Background()
	pool := pgxPoolWith(t, db, 1)
	sdb := db.OpenSQL()
	sdb.SetMaxOpenConns(1)
	for name, open := range map[string]func(...advisory.Option) *advisory.Locker{
		"pgxpool": func(o ...advisory.Option) *advisory.Locker { return advisory.NewPool(pool, o...) },
		"sql-pgx": func(o ...advisory.Option) *advisory.Locker { return advisory.New(sdb, o...) },
	} {
		t.Run(name, func(t *testing.T) {
			// The default bound for what must succeed, however slow this
			// machine is; a short one for the waits that must run out.
			roomy := open()
			held := mustLock(t)(roomy.Lock(ctx, advisory.KeyInt(1)))
			// On failure, whichever lock held is by then (ErrNotHeld after a
			// Release below): the pool cannot close while it is out.
			defer func() { held.Release(ctx) }()
			short := []advisory.Option{advisory.WithTimeout(200 * time.Millisecond)}
			verified := open(short...)
			mux := open(append(short, advisory.WithMultiplexing(2))...)
			for _, acquire := range []struct {
				name string
				f    func(context.Context, advisory.Key) (*advisory.Lock, error)
			}{
				{"a fresh Locker's first TryLock", open(short...).TryLock},
				{"a fresh Locker's first Lock", open(short...).Lock},
				{"Lock", verified.Lock}, {"TryLock", verified.TryLock},
				{"RLock", verified.RLock}, {"TryRLock", verified.TryRLock},
				{"a multiplexed TryLock", mux.TryLock},
			} {
				lk, err := acquire.f(ctx, advisory.KeyInt(2))
				if err == nil {
					mustRelease(t, lk)
				}
				if !errors.Is(err, advisory.ErrConnTimeout) || !errors.Is(err, advisory.ErrTimeout) ||
					!errors.Is(err, sqlock.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s with the pool exhausted: %v, want ErrConnTimeout matching ErrTimeout (the Locker's bound, not a context's)", acquire.name, err)
				}
				if msg := err.Error(); !strings.Contains(msg, "timed out waiting for a connection from the pool: all 1 of its connections are in use") ||
					strings.Contains(msg, "waiting for the lock") {
					t.Fatalf("%s with the pool exhausted says %q: it must say it waited for a connection of the pool, not the lock", acquire.name, msg)
				}
			}
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				lk, err := open().TryLock(cctx, advisory.KeyInt(3)) // default bound: 5 s
				if err == nil {
					lk.Release(ctx)
				}
				done <- err
			}()
			time.Sleep(20 * time.Millisecond) // let it wait; either order is a valid test
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("TryLock cancelled while waiting for a connection: %v, want context.Canceled", err)
			}
			mustRelease(t, held)
			mustRelease(t, mustLock(t)(roomy.TryLock(ctx, advisory.KeyInt(2))))

			// A wait for the lock itself says so, and is not a wait for a
			// connection.
			held = mustLock(t)(roomy.Lock(ctx, advisory.KeyInt(1)))
			// Its pool has two connections ready (the first use's probe
			// takes two), so that nothing of the bound goes to dialling,
			// however slow this machine is.
			sdbOther := db.OpenSQL()
			var ready [2]*sql.Conn
			for i := range ready {
				c, err := sdbOther.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				ready[i] = c
			}
			for _, c := range ready {
				c.Close()
			}
			// Verified first, on the default bound: a first use's probe
			// under the short bound can outlast it on a busy machine, and
			// then it rightly says it waited for a connection.
			other := advisory.New(sdbOther, short...)
			if err := other.Verify(ctx); err != nil {
				t.Fatal(err)
			}
			_, err := other.Lock(ctx, advisory.KeyInt(1))
			if !errors.Is(err, advisory.ErrTimeout) || errors.Is(err, advisory.ErrConnTimeout) ||
				!strings.Contains(err.Error(), "timed out waiting for the lock") {
				t.Fatalf("Lock of a key held elsewhere: %v, want ErrTimeout waiting for the lock", err)
			}
			mustRelease(t, held)
		})
	}
}

// panicOn is an observer that panics on one outcome.
type panicOn observe.Outcome

func (p panicOn) Observe(_ context.Context, e observe.Event) {
	if e.Outcome == observe.Outcome(p) {
		panic(p)
	}
}

// TestPanicInUserCodeReleasesEverything: a panic in user code — Do's
// function, or an observer on any event — releases the lock and the
// connection and goes on with its value: afterwards no advisory lock is
// left, the key can be taken again, and the pool closes (a pgx pool waits
// for every connection to come back).
func TestPanicInUserCodeReleasesEverything(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)
		key := advisory.KeyOf("panic-in-user-code")
		other := bc.open(t, db)
		nop := func(context.Context) error { return nil }
		cases := []struct {
			name string
			on   observe.Outcome // the observer panics on this outcome (0: never)
			held bool            // another session holds the key meanwhile
			call func(l *advisory.Locker) error
		}{
			{"Do's function", 0, false, func(l *advisory.Locker) error {
				return l.Do(ctx, key, func(context.Context) error { panic(panicOn(0)) })
			}},
			{"observer on Acquired in Do", observe.Acquired, false, func(l *advisory.Locker) error { return l.Do(ctx, key, nop) }},
			{"observer on Acquired in RLock", observe.Acquired, false, func(l *advisory.Locker) error {
				_, err := l.RLock(ctx, key)
				return err
			}},
			{"observer on Released in Do", observe.Released, false, func(l *advisory.Locker) error { return l.Do(ctx, key, nop) }},
			{"observer on Released after fn's error", observe.Released, false, func(l *advisory.Locker) error {
				return l.Do(ctx, key, func(context.Context) error { return errors.New("fn failed") })
			}},
			{"observer on Busy", observe.Busy, true, func(l *advisory.Locker) error {
				_, err := l.TryLock(ctx, key)
				return err
			}},
			{"observer on Timeout", observe.Timeout, true, func(l *advisory.Locker) error {
				short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				return l.Do(short, key, nop)
			}},
		}
		for _, c := range cases {
			l := bc.open(t, db, advisory.WithObserver(panicOn(c.on)))
			func() {
				if c.held {
					lk := mustLock(t)(other.Lock(ctx, key))
					defer mustRelease(t, lk)
				}
				var err error
				defer func() {
					if r := recover(); r == nil {
						t.Fatalf("%s: no panic; the call returned %v", c.name, err)
					} else if _, ok := r.(panicOn); !ok {
						t.Fatalf("%s: the panic did not go on with its value: %v", c.name, r)
					}
				}()
				err = c.call(l)
			}()
			waitNoLocks(t, conn)
			mustRelease(t, mustLock(t)(other.TryLock(ctx, key)))
		}
	})
}
