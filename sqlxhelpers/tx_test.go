package sqlxhelpers_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"
	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

// TestLockedTxMutualExclusion: an unversioned read-modify-write (which loses
// updates without a lock) is exact when it runs under the advisory lock, and
// no two functions are ever inside the lock at once.
func TestLockedTxMutualExclusion(t *testing.T) {
	const workers, each = 8, 40
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		db.SetMaxOpenConns(workers)
		h := newHelper(t, db)
		db.MustExec(`INSERT INTO accounts VALUES (1, 'counter', 0, 0)`)
		key := advisory.KeyOf("account:1")
		var inside, overlaps atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				for range each {
					err := h.Do(ctx, key, func(ctx context.Context, tx *sqlx.Tx) error {
						if inside.Add(1) > 1 {
							overlaps.Add(1)
						}
						defer inside.Add(-1)
						var n int64
						if err := tx.GetContext(ctx, &n, `SELECT balance FROM accounts WHERE id = 1`); err != nil {
							return err
						}
						_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = $1 WHERE id = 1`, n+1)
						return err
					}, txlock.WithTimeout(30*time.Second))
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := load(t, db, 1); got.Balance != workers*each {
			t.Errorf("balance %d, want %d", got.Balance, workers*each)
		}
		if overlaps.Load() != 0 {
			t.Errorf("%d times two functions were inside the lock together", overlaps.Load())
		}
	})
}

// TestLockedTxRetriesStale: a versioned write that goes stale inside the
// transaction retries the whole transaction, which re-reads and succeeds.
func TestLockedTxRetriesStale(t *testing.T) {
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		h := newHelper(t, db)
		db.MustExec(`INSERT INTO accounts VALUES (1, 'ann', 100, 0)`)
		attempts := 0
		err := h.Do(ctx, advisory.KeyInt(1), func(ctx context.Context, tx *sqlx.Tx) error {
			attempts++
			var a Account
			if err := tx.GetContext(ctx, &a, `SELECT id, owner, balance, version FROM accounts WHERE id = 1`); err != nil {
				return err
			}
			if attempts == 1 {
				// A writer that does not take the advisory lock changes
				// the row between our read and our write.
				db.MustExecContext(ctx, `UPDATE accounts SET balance = balance + 1000, version = version + 1 WHERE id = 1`)
			}
			a.Balance += 10
			return h.On(tx).Update(ctx, "accounts", &a, sqlxhelpers.Columns("balance"))
		}, txlock.WithRetry(retry.WithBackoff(retry.Constant(0))))
		if err != nil {
			t.Fatal(err)
		}
		if attempts != 2 {
			t.Errorf("%d attempts, want 2", attempts)
		}
		if got := load(t, db, 1); got.Balance != 1110 || got.Version != 2 {
			t.Errorf("row %+v", got)
		}
	})
}

// TestLockedTxTimeoutAndRollback: a key held elsewhere makes the wait run out
// with txlock.ErrTimeout before fn runs; fn's own error rolls back.
func TestLockedTxTimeoutAndRollback(t *testing.T) {
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		h := newHelper(t, db)
		db.MustExec(`INSERT INTO accounts VALUES (1, 'ann', 100, 0)`)
		holder, err := db.Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock(77)`); err != nil {
			t.Fatal(err)
		}
		ran := false
		err = h.Do(ctx, advisory.KeyInt(77), func(ctx context.Context, tx *sqlx.Tx) error {
			ran = true
			return nil
		}, txlock.WithTimeout(50*time.Millisecond))
		var le *lockedtx.LockError
		if !errors.Is(err, txlock.ErrTimeout) || !errors.As(err, &le) || ran {
			t.Fatalf("held key: %v (ran %v)", err, ran)
		}
		if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_unlock(77)`); err != nil {
			t.Fatal(err)
		}

		boom := errors.New("boom")
		err = h.Do(ctx, advisory.KeyInt(77), func(ctx context.Context, tx *sqlx.Tx) error {
			a := load(t, db, 1)
			a.Balance = 0
			if err := h.On(tx).Update(ctx, "accounts", &a); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("fn error: %v", err)
		}
		if got := load(t, db, 1); got.Balance != 100 || got.Version != 0 {
			t.Errorf("rolled-back write is visible: %+v", got)
		}
	})
}

// TestLockedTxOnConnAndFolded: Do runs on a *sqlx.Conn given to On, and on a
// database opened with txlock.OpenDB (BEGIN carries the lock).
func TestLockedTxOnConnAndFolded(t *testing.T) {
	ctx := context.Background()
	d := pgtest.New(t)
	d.Exec(accountsDDL)
	d.Exec(`INSERT INTO accounts VALUES (1, 'ann', 0, 0)`)
	cfg, err := pgx.ParseConfig(d.DSN)
	if err != nil {
		t.Fatal(err)
	}
	db := sqlx.NewDb(txlock.OpenDB(*cfg), "pgx")
	t.Cleanup(func() { db.Close() })
	h := newHelper(t, db)
	conn, err := db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, hh := range []*sqlxhelpers.Helper{h, h.On(conn)} {
		err := hh.Do(ctx, advisory.KeyOf("folded"), func(ctx context.Context, tx *sqlx.Tx) error {
			var held bool
			if err := tx.GetContext(ctx, &held, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted)`); err != nil {
				return err
			}
			if !held {
				return errors.New("the advisory lock is not held inside the transaction")
			}
			a := load(t, db, 1)
			a.Balance++
			return hh.On(tx).Update(ctx, "accounts", &a)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := load(t, db, 1); got.Balance != 2 || got.Version != 2 {
		t.Errorf("row %+v", got)
	}
	// A transaction cannot begin on a transaction.
	tx, err := db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := h.On(tx).Do(ctx, advisory.KeyInt(1), func(context.Context, *sqlx.Tx) error { return nil }); !errors.Is(err, versioned.ErrInvalidArg) {
		t.Errorf("Do on a *sqlx.Tx: %v", err)
	}
}

// TestLockedTxAmbiguousCommit: a COMMIT that gets no answer is an
// error matching txlock.ErrAmbiguousCommit, and the transaction is not run again.
func TestLockedTxAmbiguousCommit(t *testing.T) {
	raw, mock, err := sqlmock.New()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	db := sqlx.NewDb(raw, "postgres")
	mock.ExpectBegin()
	mock.ExpectExec(`pg_advisory_xact_lock`).WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectExec(`UPDATE "accounts"`).WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectCommit().WillReturnError(io.ErrUnexpectedEOF)
	h := newHelper(t, db)
	calls := 0
	a := Account{ID: 1, Owner: "ann", Balance: 5}
	err = h.Do(context.Background(), advisory.KeyInt(9), func(ctx context.Context, tx *sqlx.Tx) error {
		calls++
		return h.On(tx).Update(ctx, "accounts", &a)
	})
	if !errors.Is(err, txlock.ErrAmbiguousCommit) || calls != 1 {
		t.Fatalf("ambiguous commit: %v after %d calls", err, calls)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
	// Nil handles and functions are refused.
	if err := sqlxhelpers.Do(context.Background(), nil, advisory.KeyInt(1), func(context.Context, *sqlx.Tx) error { return nil }); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil db: %v", err)
	}
	if err := h.Do(context.Background(), advisory.KeyInt(1), nil); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil fn: %v", err)
	}
	var nilDB *sqlx.DB
	if err := sqlxhelpers.Do(context.Background(), nilDB, advisory.KeyInt(1), func(context.Context, *sqlx.Tx) error { return nil }); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil *sqlx.DB: %v", err)
	}
}

// TestLockedTxNestedSamePool: inside the function (with its context), a
// locked transaction or an advisory lock on the same key through the same
// *sql.DB would wait for its own caller: refused at once with
// ErrAlreadyHeld rather than waiting (for an hour, with WithTimeout(time.Hour)).
func TestLockedTxNestedSamePool(t *testing.T) {
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		h := newHelper(t, db)
		key := advisory.KeyOf("nested")
		noop := func(context.Context, *sqlx.Tx) error { return nil }
		err := h.Do(ctx, key, func(ctx context.Context, _ *sqlx.Tx) error {
			return sqlxhelpers.Do(ctx, db, key, noop, txlock.WithTimeout(time.Hour))
		})
		if !errors.Is(err, txlock.ErrAlreadyHeld) {
			t.Fatalf("nested Do, same key: %v, want ErrAlreadyHeld", err)
		}
		err = advisory.New(db.DB).Do(ctx, key, func(ctx context.Context) error {
			return h.Do(ctx, key, noop, txlock.WithTimeout(time.Hour))
		})
		if !errors.Is(err, advisory.ErrAlreadyHeld) {
			t.Fatalf("Do inside advisory.Do, same key: %v, want ErrAlreadyHeld", err)
		}
		if err := h.Do(ctx, key, func(ctx context.Context, _ *sqlx.Tx) error {
			return h.Do(ctx, advisory.KeyOf("other"), noop)
		}); err != nil {
			t.Fatalf("nested Do, other key: %v", err)
		}
	})
}

// TestLockedTxCancelledWaitLeavesTheQueue: Do cancelled while its lock
// waits behind a holder returns only once the server has left the wait (a
// cancel request to the connection's backend), on a *sqlx.DB and (pgx) on
// a *sqlx.Conn: right after it returns no backend waits for the key, and once
// the holder releases, the key is free at once. A connection closed
// mid-wait would leave its backend queued, to take the lock ahead of live
// callers.
func TestLockedTxCancelledWaitLeavesTheQueue(t *testing.T) {
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		conn, err := db.Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		holder, err := db.Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		key := advisory.KeyOf("queue")
		k := string(key.AppendArgs(nil))
		count := func(q string) int {
			var n int
			if err := db.GetContext(ctx, &n, q); err != nil {
				t.Fatal(err)
			}
			return n
		}
		queued := func() int {
			return count(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`)
		}
		handles := []sqlxhelpers.Beginner{db, conn}
		if db.DriverName() != "pgx" {
			// database/sql discards a lib/pq connection whose transaction's
			// context ended (lib/pq has ended the wait with its own cancel
			// request): a *sqlx.Conn does not outlive its first cancelled
			// Do there.
			handles = handles[:1]
		}
		for _, on := range handles {
			for round := range 5 {
				if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_lock("+k+")"); err != nil {
					t.Fatal(err)
				}
				cctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() {
					done <- sqlxhelpers.Do(cctx, on, key, func(context.Context, *sqlx.Tx) error { return nil },
						txlock.WithTimeout(time.Hour), txlock.WithoutRetry())
				}()
				for queued() == 0 {
					select {
					case err := <-done:
						t.Fatalf("%T round %d: Do returned before its lock waited: %v", on, round, err)
					case <-time.After(2 * time.Millisecond):
					}
				}
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("%T round %d: cancelled Do: %v, want context.Canceled", on, round, err)
				}
				if n := queued(); n != 0 {
					t.Fatalf("%T round %d: %d backends still queued after the cancelled Do returned", on, round, n)
				}
				if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_unlock("+k+")"); err != nil {
					t.Fatal(err)
				}
				var free bool
				if err := db.GetContext(ctx, &free, "SELECT pg_try_advisory_lock("+k+") AND pg_advisory_unlock("+k+")"); err != nil {
					t.Fatal(err)
				}
				if !free {
					t.Fatalf("%T round %d: the key is held by someone right after the holder released it", on, round)
				}
			}
		}
	})
}
