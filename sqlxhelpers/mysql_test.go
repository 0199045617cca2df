package sqlxhelpers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/versioned"
)

// The tests in this file run on a real MariaDB (internal/testing/mariatest)
// through go-sql-driver/mysql ("mysql": ? placeholders, `backquotes`).

func openMySQL(t *testing.T, ddl ...string) *sqlx.DB {
	t.Helper()
	my := mariatest.New(t)
	for _, s := range ddl {
		my.Exec(s)
	}
	db, err := sqlx.Open("mysql", my.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

const myAccountsDDL = `CREATE TABLE accounts (id BIGINT PRIMARY KEY, owner VARCHAR(40) NOT NULL, balance BIGINT NOT NULL, version INT NOT NULL DEFAULT 0)`

// TestMySQLStructWrites: struct-driven writes on MariaDB: an update bumps
// the version (also one that changes nothing else, on a default DSN), a
// stale one changes nothing and is *versioned.StaleError, a stale delete is
// refused and a current one deletes.
func TestMySQLStructWrites(t *testing.T) {
	db := openMySQL(t, myAccountsDDL, `INSERT INTO accounts VALUES (1, 'ann', 10, 0)`)
	ctx := context.Background()
	h := newHelper(t, db)
	a := Account{ID: 1, Owner: "ann", Balance: 10}
	if err := h.Update(ctx, "accounts", &a); err != nil || a.Version != 1 {
		t.Fatalf("an update that changes only the version: %v, version %d", err, a.Version)
	}
	old := Account{ID: 1, Owner: "bob", Balance: 99}
	if err := h.Update(ctx, "accounts", &old); !errors.Is(err, versioned.ErrStale) || old.Version != 0 {
		t.Fatalf("stale update: %v, version %d", err, old.Version)
	}
	a.Balance = 20
	if err := h.Update(ctx, "accounts", &a, sqlxhelpers.Columns("balance")); err != nil || a.Version != 2 {
		t.Fatalf("update of one column: %v, version %d", err, a.Version)
	}
	if err := h.Delete(ctx, "accounts", &old); !errors.Is(err, versioned.ErrStale) {
		t.Fatalf("stale delete: %v", err)
	}
	var got Account
	if err := db.Get(&got, "SELECT * FROM accounts WHERE id = 1"); err != nil || got.Balance != 20 || got.Owner != "ann" || got.Version != 2 {
		t.Fatalf("row %+v, %v", got, err)
	}
	if err := h.Delete(ctx, "accounts", &a); err != nil {
		t.Fatalf("delete: %v", err)
	}
}

// TestMySQLNamedExecGuarded: on MariaDB, NamedExec reads MySQL's grammar:
// a named UPDATE (with `backquotes` and a '#' comment after its condition)
// bumps the version, a stale one changes nothing and is
// *versioned.StaleError, a named DELETE of the current version deletes;
// a '#' comment that would hide the WHERE and an executable /*! … */
// comment are refused with *RewriteError, and nothing is sent.
func TestMySQLNamedExecGuarded(t *testing.T) {
	db := openMySQL(t, myAccountsDDL, `INSERT INTO accounts VALUES (1, 'ann', 10, 0), (2, 'bob', 10, 0)`)
	ctx := context.Background()
	h := newHelper(t, db)
	a := Account{ID: 1, Owner: "ann", Balance: 30}
	if err := h.NamedExec(ctx, "UPDATE `accounts` SET `balance` = :balance WHERE `id` = :id # the account\n", &a); err != nil || a.Version != 1 {
		t.Fatalf("named update: %v, version %d", err, a.Version)
	}
	stale := Account{ID: 1, Owner: "ann", Balance: 99}
	if err := h.NamedExec(ctx, "UPDATE accounts SET balance = :balance WHERE id = :id", &stale); !errors.Is(err, versioned.ErrStale) || stale.Version != 0 {
		t.Fatalf("stale named update: %v, version %d", err, stale.Version)
	}
	for _, q := range []string{
		"UPDATE accounts SET balance = :balance # WHERE id = :id\n",
		"UPDATE accounts SET balance = :balance WHERE id = :id /*! OR 1 = 1 */",
		`UPDATE accounts SET owner = "x" WHERE id = :id`,
	} {
		b := Account{ID: 2, Owner: "bob", Balance: 50}
		var re *sqlxhelpers.RewriteError
		if err := h.NamedExec(ctx, q, &b); !errors.As(err, &re) || b.Version != 0 {
			t.Fatalf("%q: %v, version %d; want *RewriteError", q, err, b.Version)
		}
	}
	var sum, versions int64
	if err := db.QueryRow("SELECT SUM(balance), SUM(version) FROM accounts").Scan(&sum, &versions); err != nil || sum != 40 || versions != 1 {
		t.Fatalf("balances %d, versions %d (%v): a refused or stale statement changed a row", sum, versions, err)
	}
	if err := h.NamedExec(ctx, "DELETE FROM accounts WHERE id = :id", &a); err != nil {
		t.Fatalf("named delete: %v", err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM accounts").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows after the delete (%v)", n, err)
	}
}

// TestMySQLNoLostUpdateNamed: 32 goroutines × 300 read–modify–write
// increments of one row through NamedExec and retry on MariaDB: exactly
// 9,600.
func TestMySQLNoLostUpdateNamed(t *testing.T) {
	workers, each := 32, mariatest.Increments()
	got := myIncrements(t, workers, each, func(ctx context.Context, h *sqlxhelpers.Helper, a *Account) error {
		return h.NamedExec(ctx, "UPDATE accounts SET balance = :balance WHERE id = :id", a)
	})
	if want := int64(workers * each); got.Balance != want || int64(got.Version) != want {
		t.Fatalf("balance %d at version %d, want %d", got.Balance, got.Version, want)
	}
}

// TestMySQLNoLostUpdate: 32 goroutines × 300 read–modify–write increments
// of one row through Helper.Update and retry on MariaDB: exactly 9,600.
func TestMySQLNoLostUpdate(t *testing.T) {
	workers, each := 32, mariatest.Increments()
	got := myIncrements(t, workers, each, func(ctx context.Context, h *sqlxhelpers.Helper, a *Account) error {
		return h.Update(ctx, "accounts", a, sqlxhelpers.Columns("balance"))
	})
	if want := int64(workers * each); got.Balance != want || int64(got.Version) != want {
		t.Fatalf("balance %d at version %d, want %d", got.Balance, got.Version, want)
	}
}

// myIncrements runs workers goroutines × each read–modify–write increments
// of account 1's balance on MariaDB, each written by write under retry,
// and returns the row at the end.
func myIncrements(t *testing.T, workers, each int, write func(context.Context, *sqlxhelpers.Helper, *Account) error) Account {
	db := openMySQL(t, myAccountsDDL, `INSERT INTO accounts VALUES (1, 'ann', 0, 0)`)
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	h := newHelper(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	policy := retry.New(retry.WithMaxAttempts(1_000_000),
		retry.WithBackoff(retry.Exponential(2*time.Millisecond, 250*time.Millisecond)))
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for range each {
				err := policy.Do(ctx, func(ctx context.Context) error {
					var a Account
					if err := db.GetContext(ctx, &a, "SELECT * FROM accounts WHERE id = 1"); err != nil {
						return err
					}
					a.Balance++
					return write(ctx, h, &a)
				})
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var got Account
	if err := db.Get(&got, "SELECT * FROM accounts WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestMySQLFencedProbeReadsTheNewestRow: a fenced struct write inside a
// REPEATABLE READ transaction whose snapshot predates another session's
// delete reports the row gone (the probe is a locking read of the newest
// row), and one whose row a newer holder fenced reports *FencedError.
func TestMySQLFencedProbeReadsTheNewestRow(t *testing.T) {
	db := openMySQL(t, `CREATE TABLE seats (id BIGINT PRIMARY KEY, holder VARCHAR(40) NOT NULL, version BIGINT NOT NULL DEFAULT 1, holder_token BIGINT NULL)`)
	h := newHelper(t, db)
	ctx := sqlock.WithFencingToken(context.Background(), 5)
	for _, c := range []struct {
		other string
		check func(error) bool
	}{
		{"DELETE FROM seats WHERE id = 1", func(err error) bool {
			var se *versioned.StaleError
			return errors.As(err, &se) && se.Probed && se.Gone
		}},
		{"UPDATE seats SET version = 2, holder_token = 9 WHERE id = 1", func(err error) bool {
			return errors.Is(err, versioned.ErrFenced)
		}},
	} {
		db.MustExec("DELETE FROM seats")
		db.MustExec("INSERT INTO seats (id, holder) VALUES (1, '')")
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var s Seat
		if err := tx.GetContext(ctx, &s, "SELECT id, holder, version, COALESCE(holder_token, 0) AS holder_token FROM seats WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		db.MustExec(c.other)
		s.Holder = "me"
		err = h.On(tx).Update(ctx, "seats", &s)
		tx.Rollback()
		if !c.check(err) || s.Version != 1 {
			t.Fatalf("after %q: %#v, version %d", c.other, err, s.Version)
		}
	}
}
