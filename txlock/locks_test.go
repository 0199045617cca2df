package txlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
)

// A wait that runs out is a typed timeout carrying the server's 55P03, fn
// never runs, nothing stays locked, and the handle keeps its connection
// (on pgx the failed BEGIN is rolled back explicitly; a pool would destroy
// a connection returned in the failed-transaction state).
func TestTimeout(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	admin := db.Pool()
	ctx := context.Background()
	key := advisory.KeyOf("timeout")
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			// Open (and keep) a connection first.
			if err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { return nil }); err != nil {
				t.Fatal(err)
			}
			before := be.conns()
			h := holdLocks(t, db, false, key)
			var evs observetest.Recorder
			ran := false
			err := be.do(ctx, []advisory.Key{advisory.KeyOf("free"), key}, func(context.Context, q) error { ran = true; return nil },
				txlock.WithTimeout(50*time.Millisecond), txlock.WithObserver(&evs))
			if !errors.Is(err, txlock.ErrTimeout) || errors.Is(err, txlock.ErrNotAcquired) {
				t.Fatalf("got %v, want ErrTimeout", err)
			}
			var le *lockedtx.LockError
			if !errors.As(err, &le) || le.Timeout != 50*time.Millisecond || len(le.Keys) != 2 || le.Wait < 50*time.Millisecond {
				t.Fatalf("LockError %+v", le)
			}
			if code := retry.SQLState(err); code != "55P03" {
				t.Fatalf("SQLSTATE %q, want 55P03 in the chain", code)
			}
			if ran {
				t.Fatal("fn ran without the lock")
			}
			if n := evs.Count(observe.LockAcquire, observe.Timeout); n != 2 {
				t.Fatalf("%d timeout events, want one per key: %+v", n, evs.Events())
			}
			if after := be.conns(); after != before {
				t.Fatalf("connections %d → %d: the timed-out connection was not kept", before, after)
			}
			h.release()
			if got := advisoryLocks(t, admin); len(got) != 0 {
				t.Fatalf("locks left: %v", got)
			}
			// The kept connection works.
			if err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { return nil }); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Timeouts are retried only when asked: with retry.RetryLockTimeout the
// whole transaction runs again and gets the lock once the holder is gone.
func TestTimeoutRetriedWhenAsked(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	ctx := context.Background()
	key := advisory.KeyOf("timeout-retry")
	for _, be := range backends(t, db, bePgxPool, beFold) {
		t.Run(be.name, func(t *testing.T) {
			h := holdLocks(t, db, false, key)
			// The observer releases the holder when the first wait times out.
			obs := observerFunc(func(ev observe.Event) {
				if ev.Kind == observe.LockAcquire && ev.Outcome == observe.Timeout {
					h.release()
				}
			})
			calls := 0
			err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { calls++; return nil },
				txlock.WithTimeout(20*time.Millisecond), txlock.WithObserver(obs),
				txlock.WithRetry(retry.RetryLockTimeout(), retry.WithBackoff(retry.Constant(0))))
			if err != nil || calls != 1 {
				t.Fatalf("got %v after %d calls", err, calls)
			}
		})
	}
}

type observerFunc func(observe.Event)

func (f observerFunc) Observe(_ context.Context, ev observe.Event) { f(ev) }

// lock_timeout is SET LOCAL: it bounds the waits of the transaction (fn's
// included) and is gone when the transaction ends.
func TestTimeoutIsTransactionScoped(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET lock_timeout = '7s'"); err != nil {
		t.Fatal(err)
	}
	show := func(db interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		var s string
		if err := db.QueryRow(ctx, "SHOW lock_timeout").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		opt    txlock.Option
		inside string
	}{
		{txlock.WithTimeout(1500 * time.Millisecond), "1500ms"},
		{txlock.WithTimeout(time.Microsecond), "1ms"}, // rounded up, never 0 (= no bound in PostgreSQL)
		{nil, "5s"}, // DefaultTimeout
	} {
		err := txlock.DoPgx(ctx, conn, advisory.KeyInt(1), func(ctx context.Context, tx pgx.Tx) error {
			if got := show(tx); got != tc.inside {
				t.Errorf("inside: lock_timeout = %s, want %s", got, tc.inside)
			}
			return nil
		}, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		if got := show(conn); got != "7s" {
			t.Fatalf("after the transaction: lock_timeout = %s, want the session's 7s", got)
		}
	}
}

// TryOnce never waits: a key held elsewhere gives ErrNotAcquired without
// running fn, nothing stays locked (not even the keys that were free), and
// the connection is kept; a free key runs fn under the lock.
func TestTryOnce(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	admin := db.Pool()
	ctx := context.Background()
	held, free := advisory.KeyOf("try-held"), advisory.KeyOf("try-free")
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			if err := be.do(ctx, []advisory.Key{free}, func(context.Context, q) error { return nil }); err != nil {
				t.Fatal(err)
			}
			before := be.conns()
			h := holdLocks(t, db, false, held)
			for _, shared := range []bool{false, true} {
				opts := []txlock.Option{txlock.TryOnce(), txlock.WithTimeout(time.Hour)}
				if shared {
					opts = append(opts, txlock.Shared())
				}
				var evs observetest.Recorder
				ran := false
				err := be.do(ctx, []advisory.Key{free, held}, func(context.Context, q) error { ran = true; return nil },
					append(opts, txlock.WithObserver(&evs))...)
				if !errors.Is(err, txlock.ErrNotAcquired) || errors.Is(err, txlock.ErrTimeout) {
					t.Fatalf("shared=%v: got %v, want ErrNotAcquired", shared, err)
				}
				if ran {
					t.Fatal("fn ran without the lock")
				}
				if evs.Count(observe.LockAcquire, observe.Busy) != 2 {
					t.Fatalf("events: %+v", evs.Events())
				}
				if got := advisoryLocks(t, admin); len(got) != 1 {
					t.Fatalf("shared=%v: locks besides the holder's: %v", shared, got)
				}
				// A free key: fn runs, under the lock.
				err = be.do(ctx, []advisory.Key{free}, func(context.Context, q) error {
					if got := advisoryLocks(t, admin); len(got) != 2 {
						t.Errorf("inside: %v", got)
					}
					return nil
				}, opts...)
				if err != nil {
					t.Fatal(err)
				}
			}
			if after := be.conns(); after != before {
				t.Fatalf("connections %d → %d", before, after)
			}
			h.release()
		})
	}
}

// Shared holders run together; an exclusive one is kept out while they
// hold, and gets in when they are gone.
func TestShared(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	admin := db.Pool()
	ctx := context.Background()
	key := advisory.KeyOf("shared")
	for _, be := range backends(t, db, bePgxPool, beSQL, beFold) {
		t.Run(be.name, func(t *testing.T) {
			var inside sync.WaitGroup
			inside.Add(2)
			leave := make(chan struct{})
			errs := make(chan error, 2)
			for range 2 {
				go func() {
					errs <- be.do(ctx, []advisory.Key{key}, func(context.Context, q) error {
						inside.Done()
						<-leave // both are inside at once, or this never returns
						return nil
					}, txlock.Shared())
				}()
			}
			inside.Wait()
			if got, want := advisoryLocks(t, admin), append(expectLocks("ShareLock", key), expectLocks("ShareLock", key)...); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("pg_locks with two shared holders: %v", got)
			}
			err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { return nil }, txlock.TryOnce())
			if !errors.Is(err, txlock.ErrNotAcquired) {
				t.Fatalf("exclusive try while shared held: %v", err)
			}
			err = be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { return nil }, txlock.WithTimeout(30*time.Millisecond))
			if !errors.Is(err, txlock.ErrTimeout) {
				t.Fatalf("exclusive wait while shared held: %v", err)
			}
			// A third shared holder is not kept out.
			if err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { return nil }, txlock.Shared(), txlock.TryOnce()); err != nil {
				t.Fatalf("third shared holder: %v", err)
			}
			close(leave)
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { return nil }, txlock.TryOnce()); err != nil {
				t.Fatalf("exclusive after the shared holders left: %v", err)
			}
		})
	}
}

// A context cancelled while fn runs: the transaction is rolled back (the
// write is not there), the error is the context's, nothing is retried, and
// the lock is gone — at once when fn returns by itself; after the server
// has seen the connection close when the cancellation interrupted one of
// fn's statements (the driver closes the connection then).
func TestContextCancelledInsideFn(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec("CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL); INSERT INTO t VALUES (1, 0)")
	admin := db.Pool()
	key := []advisory.Key{advisory.KeyOf("cancel")}
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			if err := be.do(context.Background(), key, func(context.Context, q) error { return nil }); err != nil {
				t.Fatal(err)
			}
			for _, how := range []string{"fn returns ctx.Err", "fn returns nil", "statement interrupted"} {
				before := be.conns()
				ctx, cancel := context.WithCancel(context.Background())
				calls := 0
				err := be.do(ctx, key, func(ctx context.Context, tx q) error {
					calls++
					if err := tx.Exec(ctx, "UPDATE t SET n = n + 1 WHERE id = 1"); err != nil {
						return err
					}
					switch how {
					case "fn returns ctx.Err":
						cancel()
						<-ctx.Done()
						return ctx.Err()
					case "fn returns nil":
						cancel()
						return nil
					default:
						go func() {
							waitForSleep(ctx, admin)
							cancel()
						}()
						return tx.Exec(ctx, "SELECT pg_sleep(60)")
					}
				})
				cancel()
				if !errors.Is(err, context.Canceled) && !(how == "statement interrupted" && be.name == bePQ) {
					t.Fatalf("%s: got %v, want context.Canceled", how, err)
				}
				if err == nil || calls != 1 {
					t.Fatalf("%s: got %v after %d calls", how, err, calls)
				}
				if how == "statement interrupted" {
					waitNoLocks(t, admin)
				} else {
					if got := advisoryLocks(t, admin); len(got) != 0 {
						t.Fatalf("%s: locks left: %v", how, got)
					}
					// Rolled back in place: the connection is kept.
					if after := be.conns(); after != before {
						t.Fatalf("%s: connections %d → %d", how, before, after)
					}
				}
				if n := counterT(t, admin); n != 0 {
					t.Fatalf("%s: the cancelled transaction's write is there (n = %d)", how, n)
				}
			}
		})
	}
}

// waitForSleep waits until some session of the database runs pg_sleep.
func waitForSleep(ctx context.Context, admin *pgxpool.Pool) {
	for ctx.Err() == nil {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep(60)%' AND state = 'active'`).Scan(&n)
		if err != nil || n > 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func counterT(t *testing.T, admin *pgxpool.Pool) int {
	var n int
	if err := admin.QueryRow(context.Background(), "SELECT n FROM t WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A context that ends while the lock is awaited ends the wait with the
// context's error (DeadlineExceeded for a deadline), fn never runs, nothing
// is retried, and no lock is left once the holder lets go.
func TestContextEndsWhileWaiting(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	admin := db.Pool()
	key := advisory.KeyOf("deadline")
	// Whether the server ends the wait (55P03) or the deadline passes
	// before it is sent (a busy machine), the answer is the same typed
	// timeout: no bound on the machine's speed is needed.
	const deadline = 200 * time.Millisecond
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			h := holdLocks(t, db, false, key)
			var evs observetest.Recorder
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			ran := false
			err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { ran = true; return nil },
				txlock.WithTimeout(time.Hour), txlock.WithObserver(&evs))
			// The deadline set the wait's bound: the server ended the wait
			// (55P03) and the error is a timeout caused by the deadline.
			wantDeadlineTimeout(t, err, ran, &evs)
			h.release()
			waitNoLocks(t, admin)
		})
	}
}

// wantDeadlineTimeout fails t unless a call the caller's deadline ended
// answered with the typed timeout — an error matching ErrTimeout and
// context.DeadlineExceeded — without running fn, reporting one Timeout
// event and no retry.
func wantDeadlineTimeout(t *testing.T, err error, ran bool, evs *observetest.Recorder) {
	t.Helper()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, txlock.ErrTimeout) || ran {
		t.Fatalf("got %v (fn ran: %v), want txlock.ErrTimeout and context.DeadlineExceeded", err, ran)
	}
	if evs.Count(observe.LockAcquire, observe.Timeout) != 1 || evs.Count(observe.Retry, observe.OutcomeNone) != 0 {
		t.Fatalf("events: %+v", evs.Events())
	}
}

// A deadline that passed before the call (or before a retry) is the same
// typed timeout as a wait the deadline ended, as advisory answers the same
// context: ErrTimeout matching context.DeadlineExceeded, one Timeout
// event, fn not run, nothing retried, for a waiting and a try-once call.
func TestDeadlinePassedBeforeTheCallIsTheTypedTimeout(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	key := advisory.KeyOf("deadline:passed")
	for _, be := range backends(t, db) {
		for _, opts := range [][]txlock.Option{nil, {txlock.TryOnce()}} {
			t.Run(fmt.Sprintf("%s/try-once=%v", be.name, opts != nil), func(t *testing.T) {
				var evs observetest.Recorder
				ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
				defer cancel()
				ran := false
				err := be.do(ctx, []advisory.Key{key}, func(context.Context, q) error { ran = true; return nil },
					append(opts, txlock.WithObserver(&evs))...)
				wantDeadlineTimeout(t, err, ran, &evs)
			})
		}
	}
}

// A deadline that passes while the call waits for a pooled connection
// (every one of them busy) is the same typed timeout: ErrTimeout matching
// context.DeadlineExceeded, one Timeout event, fn not run, nothing retried
// — on a pgx pool and on database/sql, as advisory answers the same wait.
// (Beside CPU hogs, a pool that had to dial met the deadline this way and
// the caller got the bare context error.)
func TestDeadlineWhileWaitingForAConnectionIsTheTypedTimeout(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	key := advisory.KeyOf("deadline:pool")
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	// Each case opens a pool of one connection, takes that connection for
	// the test's own use, and returns the call to make.
	type call func(ctx context.Context, fn func() error, opts ...txlock.Option) error
	sqlCase := func(h *sql.DB) call {
		t.Cleanup(func() { h.Close() })
		h.SetMaxOpenConns(1)
		c, err := h.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return func(ctx context.Context, fn func() error, opts ...txlock.Option) error {
			return txlock.Do(ctx, h, key, func(context.Context, *sql.Tx) error { return fn() }, opts...)
		}
	}
	for _, c := range []struct {
		name string
		open func() call
	}{
		{"pgxpool", func() call {
			p := db.OpenPool(func(c *pgxpool.Config) { c.MaxConns = 1 })
			c, err := p.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Release)
			return func(ctx context.Context, fn func() error, opts ...txlock.Option) error {
				return txlock.DoPgx(ctx, p, key, func(context.Context, pgx.Tx) error { return fn() }, opts...)
			}
		}},
		{"database/sql (pgx)", func() call { return sqlCase(stdlib.OpenDB(*cfg)) }},
		{"OpenDB", func() call { return sqlCase(txlock.OpenDB(*cfg)) }},
		{"lib/pq", func() call {
			h, err := sql.Open("postgres", db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			return sqlCase(h)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			do := c.open()
			var evs observetest.Recorder
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			ran := false
			err := do(ctx, func() error { ran = true; return nil }, txlock.WithObserver(&evs))
			wantDeadlineTimeout(t, err, ran, &evs)
		})
	}
}

// A timeout and a try-once refusal mean the same as advisory's: each
// matches advisory's sentinel of the same name (and not the other one), so
// a caller that handles advisory.ErrTimeout handles txlock's too.
func TestErrorsMatchAdvisorySentinels(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	ctx := context.Background()
	key := advisory.KeyOf("same-meaning")
	h := holdLocks(t, db, false, key)
	defer h.release()
	for _, be := range backends(t, db, bePgxPool, beFold) {
		t.Run(be.name, func(t *testing.T) {
			noop := func(context.Context, q) error { return nil }
			err := be.do(ctx, []advisory.Key{key}, noop, txlock.WithTimeout(20*time.Millisecond), txlock.WithoutRetry())
			if !errors.Is(err, advisory.ErrTimeout) || !errors.Is(err, txlock.ErrTimeout) || errors.Is(err, advisory.ErrNotAcquired) {
				t.Fatalf("timeout: %v", err)
			}
			err = be.do(ctx, []advisory.Key{key}, noop, txlock.TryOnce())
			if !errors.Is(err, advisory.ErrNotAcquired) || !errors.Is(err, txlock.ErrNotAcquired) || errors.Is(err, advisory.ErrTimeout) {
				t.Fatalf("try-once: %v", err)
			}
		})
	}
}
