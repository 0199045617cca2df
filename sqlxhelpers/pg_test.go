package sqlxhelpers_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/versioned"
)

func TestMain(m *testing.M) { pgtest.Main(m, mariatest.Close) }

// Account is the test model: key by the id default, version by tag.
type Account struct {
	ID      int64  `db:"id"`
	Owner   string `db:"owner"`
	Balance int64  `db:"balance"`
	Version int32  `db:"version" lock:"version"`
}

const accountsDDL = `CREATE TABLE accounts (
	id      bigint PRIMARY KEY,
	owner   text   NOT NULL,
	balance bigint NOT NULL,
	version integer NOT NULL DEFAULT 0)`

// drivers runs f once with the pgx stdlib driver and once with lib/pq, each
// on a fresh database.
func drivers(t *testing.T, ddl string, f func(t *testing.T, db *sqlx.DB)) {
	t.Run("pgx", func(t *testing.T) {
		d := pgtest.New(t)
		d.Exec(ddl)
		f(t, sqlx.NewDb(d.SQL(), "pgx"))
	})
	t.Run("pq", func(t *testing.T) {
		d := pgtest.New(t)
		d.Exec(ddl)
		db, err := sqlx.Open("postgres", d.DSN)
		if err != nil {
			t.Fatal(err)
		}
		// Closed before pgtest drops the database (cleanups run last-in first-out).
		t.Cleanup(func() { db.Close() })
		f(t, db)
	})
}

func newHelper(t testing.TB, db *sqlx.DB, opts ...sqlxhelpers.Option) *sqlxhelpers.Helper {
	t.Helper()
	h, err := sqlxhelpers.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func load(t testing.TB, db *sqlx.DB, id int64) Account {
	t.Helper()
	var a Account
	if err := db.Get(&a, `SELECT id, owner, balance, version FROM accounts WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestStructUpdateDelete(t *testing.T) {
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		var stale atomic.Int32
		h := newHelper(t, db, sqlxhelpers.WithObserver(observeFunc(func(e observe.Event) {
			if e.Kind == observe.Stale {
				stale.Add(1)
			}
		})))
		db.MustExec(`INSERT INTO accounts VALUES (1, 'ann', 100, 0)`)

		a, b := load(t, db, 1), load(t, db, 1)
		a.Balance = 150
		if err := h.Update(ctx, "accounts", &a); err != nil {
			t.Fatal(err)
		}
		if a.Version != 1 {
			t.Errorf("struct version %d, want 1", a.Version)
		}
		if got := load(t, db, 1); got != a {
			t.Errorf("row %+v, want %+v", got, a)
		}

		// b still holds version 0: stale, and nothing changes.
		b.Balance = 999
		b.Owner = "mallory"
		err := h.Update(ctx, "accounts", &b)
		var se *versioned.StaleError
		if !errors.Is(err, versioned.ErrStale) || !errors.As(err, &se) {
			t.Fatalf("stale update: %v", err)
		}
		if se.Op != "update" || se.Expected != 0 || se.Key != int64(1) || se.Table != "accounts" {
			t.Errorf("StaleError %+v", se)
		}
		if b.Version != 0 || b.Balance != 999 {
			t.Errorf("stale update changed the struct: %+v", b)
		}
		if got := load(t, db, 1); got != a {
			t.Errorf("stale update changed the row: %+v, want %+v", got, a)
		}
		if err := h.Delete(ctx, "accounts", &b); !errors.Is(err, versioned.ErrStale) {
			t.Fatalf("stale delete: %v", err)
		}
		if got := load(t, db, 1); got != a {
			t.Errorf("stale delete changed the row: %+v", got)
		}

		// A column subset writes only those columns.
		a.Owner = "not written"
		a.Balance = 175
		if err := h.Update(ctx, "accounts", &a, sqlxhelpers.Columns("balance")); err != nil {
			t.Fatal(err)
		}
		if got := load(t, db, 1); got.Owner != "ann" || got.Balance != 175 || got.Version != 2 || a.Version != 2 {
			t.Errorf("subset update: row %+v struct %+v", got, a)
		}

		if err := h.Delete(ctx, "accounts", &a); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM accounts`); err != nil || n != 0 {
			t.Errorf("after delete: %d rows, %v", n, err)
		}
		// Gone: another update or delete is stale.
		if err := h.Update(ctx, "accounts", &a); !errors.Is(err, versioned.ErrStale) {
			t.Errorf("update of a deleted row: %v", err)
		}
		if stale.Load() != 3 {
			t.Errorf("observer saw %d stale writes, want 3", stale.Load())
		}
	})
}

func TestNamedExecGuarded(t *testing.T) {
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		h := newHelper(t, db)
		db.MustExec(`INSERT INTO accounts VALUES (1, 'ann', 100, 0), (2, 'bob', 100, 0)`)
		const pay = `UPDATE accounts SET balance = :balance WHERE id = :id OR owner = 'bob'`

		a, b := load(t, db, 1), load(t, db, 1)
		a.Balance = 50
		// The guard checks the version of whatever rows the user's WHERE
		// matches: here both rows, both at version 0. Zero rows is stale,
		// one is success, more is *versioned.RowsError (the statement ran:
		// in a transaction, roll it back).
		if err := h.NamedExec(ctx, pay, &a); !errors.Is(err, versioned.ErrKeyNotUnique) {
			t.Fatalf("a non-key WHERE: %v", err)
		}
		if a.Version != 0 {
			t.Errorf("a failed write bumped the struct to %d", a.Version)
		}
		db.MustExec(`UPDATE accounts SET balance = 100, version = 0 WHERE id = 1`)
		db.MustExec(`UPDATE accounts SET balance = 100, version = 7 WHERE id = 2`)

		const payByID = `UPDATE accounts SET balance = :balance WHERE id = :id -- by key`
		a.Balance = 50
		if err := h.NamedExec(ctx, payByID, &a); err != nil {
			t.Fatal(err)
		}
		if got := load(t, db, 1); got != a || a.Version != 1 {
			t.Errorf("row %+v struct %+v", got, a)
		}
		// RETURNING runs; Exec discards the rows and counts them.
		a.Balance = 60
		if err := h.NamedExec(ctx, `UPDATE accounts SET balance = :balance WHERE id = :id RETURNING balance, version`, &a); err != nil {
			t.Fatal(err)
		}
		if got := load(t, db, 1); got != a || a.Version != 2 {
			t.Errorf("RETURNING: row %+v struct %+v", got, a)
		}
		b.Balance = 0
		if err := h.NamedExec(ctx, payByID, &b); !errors.Is(err, versioned.ErrStale) {
			t.Fatalf("stale named update: %v", err)
		}
		if got := load(t, db, 1); got != a {
			t.Errorf("stale named update changed the row: %+v", got)
		}
		// The guard sits outside the user's OR: a stale version cannot
		// slip through "OR true".
		if err := h.NamedExec(ctx, `UPDATE accounts SET balance = :balance WHERE id = :id OR true`, &b); !errors.Is(err, versioned.ErrStale) {
			t.Fatalf("OR true with a stale version: %v", err)
		}
		if got := load(t, db, 1); got != a {
			t.Errorf("OR true changed the row: %+v", got)
		}
		const del = `DELETE FROM accounts WHERE id = :id AND owner = :owner`
		if err := h.NamedExec(ctx, del, &b); !errors.Is(err, versioned.ErrStale) {
			t.Fatalf("stale named delete: %v", err)
		}
		if err := h.NamedExec(ctx, del, &a); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM accounts WHERE id = 1`); err != nil || n != 0 {
			t.Errorf("named delete left %d rows (%v)", n, err)
		}
		// Refusals reach nothing: no WHERE at all.
		if err := h.NamedExec(ctx, `UPDATE accounts SET balance = :balance`, &a); sqlxhelpers.KindOf(err) != "no-where" {
			t.Errorf("no WHERE: %v", err)
		}
		if got := load(t, db, 2); got.Balance != 100 || got.Version != 7 {
			t.Errorf("bob's row changed: %+v", got)
		}
	})
}

type observeFunc func(observe.Event)

func (f observeFunc) Observe(_ context.Context, e observe.Event) { f(e) }

// TestNoLostUpdate: 32 goroutines each add 1 to one counter 300 times with
// read, modify, struct-driven Update, retried on stale versions. Every
// increment lands exactly once.
func TestNoLostUpdate(t *testing.T) {
	const workers, each = 32, 300
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		db.SetMaxOpenConns(workers)
		db.SetMaxIdleConns(workers)
		h := newHelper(t, db)
		db.MustExec(`INSERT INTO accounts VALUES (1, 'counter', 0, 0)`)
		var retries, stale atomic.Int64
		obs := observeFunc(func(e observe.Event) {
			if e.Kind == observe.Retry {
				retries.Add(1)
			}
		})
		policy := retry.New(
			retry.WithMaxAttempts(100_000), // contention decides the count; never give up in the test
			retry.WithBackoff(retry.Exponential(50*time.Microsecond, 2*time.Millisecond)),
			retry.WithObserver(obs))
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				for range each {
					err := policy.Do(ctx, func(ctx context.Context) error {
						var a Account
						if err := db.GetContext(ctx, &a, `SELECT id, owner, balance, version FROM accounts WHERE id = 1`); err != nil {
							return err
						}
						a.Balance++
						err := h.Update(ctx, "accounts", &a, sqlxhelpers.Columns("balance"))
						if errors.Is(err, versioned.ErrStale) {
							stale.Add(1)
						}
						return err
					})
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
		got := load(t, db, 1)
		if got.Balance != workers*each || got.Version != workers*each {
			t.Fatalf("balance %d version %d, want %d", got.Balance, got.Version, workers*each)
		}
		if retries.Load() != stale.Load() {
			t.Errorf("%d retries for %d stale writes", retries.Load(), stale.Load())
		}
		t.Logf("%d increments, %d stale writes retried", got.Balance, retries.Load())
	})
}

// TestNoLostUpdateNamed: the same race through a hand-written statement
// guarded by NamedExec (16 goroutines × 50).
func TestNoLostUpdateNamed(t *testing.T) {
	const workers, each = 16, 50
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		db.SetMaxOpenConns(workers)
		h := newHelper(t, db)
		db.MustExec(`INSERT INTO accounts VALUES (1, 'counter', 0, 0)`)
		policy := retry.New(retry.WithMaxAttempts(100_000),
			retry.WithBackoff(retry.Exponential(50*time.Microsecond, 2*time.Millisecond)))
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				for range each {
					err := policy.Do(ctx, func(ctx context.Context) error {
						var a Account
						if err := db.GetContext(ctx, &a, `SELECT id, owner, balance, version FROM accounts WHERE id = 1`); err != nil {
							return err
						}
						a.Balance++
						return h.NamedExec(ctx, `UPDATE accounts SET balance = :balance WHERE id = :id`, &a)
					})
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
		if got := load(t, db, 1); got.Balance != workers*each || got.Version != workers*each {
			t.Fatalf("balance %d version %d, want %d", got.Balance, got.Version, workers*each)
		}
	})
}
