package sqlxhelpers_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jmoiron/sqlx"
	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

// exampleDB is a go-sqlmock database posing as PostgreSQL, so the examples
// can show the exact SQL without a server.
func exampleDB() (*sqlx.DB, sqlmock.Sqlmock) {
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		panic(err)
	}
	return sqlx.NewDb(db, "pgx"), mock
}

func ExampleHelper_Update() {
	db, mock := exampleDB()
	defer db.Close()
	h, _ := sqlxhelpers.New(db)

	type Seat struct {
		ID      int64  `db:"id"`
		Holder  string `db:"holder"`
		Version int64  `db:"version" lock:"version"`
	}
	s := Seat{ID: 42, Holder: "", Version: 7} // as read earlier
	s.Holder = "ann"

	const sql = `UPDATE "seats" SET "holder" = $1, "version" = "version" + 1 WHERE "id" = $2 AND "version" = $3`
	mock.ExpectExec(sql).WithArgs("ann", int64(42), int64(7)).WillReturnResult(sqlmock.NewResult(0, 1))
	err := h.Update(context.Background(), "seats", &s)
	fmt.Println(err, s.Version)

	// Someone else took the seat meanwhile: the row is no longer at
	// version 8.
	mock.ExpectExec(sql).WithArgs("bob", int64(42), int64(8)).WillReturnResult(sqlmock.NewResult(0, 0))
	s.Holder = "bob"
	err = h.Update(context.Background(), "seats", &s)
	fmt.Println(errors.Is(err, versioned.ErrStale), s.Version)
	// Output:
	// <nil> 8
	// true 8
}

// A struct with a lock:"fence" field is written only under a lock: the
// fencing token comes from the context (here a lease's, token 7), is
// checked against the row's fence and written into it. After a takeover
// (the row's fence is 8) the write is refused.
func ExampleHelper_Update_fenced() {
	db, mock := exampleDB()
	defer db.Close()
	h, _ := sqlxhelpers.New(db)

	type Seat struct {
		ID          int64  `db:"id"`
		Holder      string `db:"holder"`
		Version     int64  `db:"version" lock:"version"`
		HolderToken int64  `db:"holder_token" lock:"fence"`
	}
	s := Seat{ID: 42, Holder: "ann", Version: 7}

	const sql = `UPDATE "seats" SET "holder" = $1, "version" = "version" + 1, "holder_token" = $2 WHERE "id" = $3 AND "version" = $4 AND COALESCE("holder_token", 0) <= $5`
	mock.ExpectExec(sql).WithArgs("ann", int64(7), int64(42), int64(7), int64(7)).WillReturnResult(sqlmock.NewResult(0, 1))
	ctx := sqlock.WithFencingToken(context.Background(), 7) // l.Token() of the caller's lease
	err := h.Update(ctx, "seats", &s)
	fmt.Println(err, s.Version, s.HolderToken)

	mock.ExpectExec(sql).WithArgs("ann", int64(7), int64(42), int64(8), int64(7)).WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectQuery(`SELECT "version", "holder_token" FROM "seats" WHERE "id" = $1`).WithArgs(int64(42)).
		WillReturnRows(sqlmock.NewRows([]string{"version", "holder_token"}).AddRow(9, 8))
	err = h.Update(ctx, "seats", &s)
	fmt.Println(errors.Is(err, versioned.ErrFenced), s.Version)

	err = h.Update(context.Background(), "seats", &s) // no token: refused, nothing sent
	fmt.Println(errors.Is(err, versioned.ErrInvalidArg))
	// Output:
	// <nil> 8 7
	// true 8
	// true
}

func ExampleHelper_NamedExec() {
	db, mock := exampleDB()
	defer db.Close()
	h, _ := sqlxhelpers.New(db)

	a := Account{ID: 1, Owner: "ann", Balance: 70, Version: 3}
	const pay = `UPDATE accounts SET balance = :balance WHERE id = :id OR owner = :owner`
	// The condition is parenthesised, so its OR cannot bypass the guard.
	mock.ExpectExec(`UPDATE accounts SET balance = $1, "version" = "version" + 1 WHERE (id = $2 OR owner = $3) AND "version" = $4`).
		WithArgs(int64(70), int64(1), "ann", int64(3)).WillReturnResult(sqlmock.NewResult(0, 1))
	err := h.NamedExec(context.Background(), pay, &a)
	fmt.Println(err, a.Version)
	// Output:
	// <nil> 4
}

func ExampleRewriteError() {
	db, _ := exampleDB() // no statement is expected: refusals send nothing
	defer db.Close()
	h, _ := sqlxhelpers.New(db)

	a := Account{ID: 1, Owner: "ann", Balance: 70, Version: 3}
	for _, q := range []string{
		`UPDATE accounts SET balance = 0`,
		`UPDATE accounts SET balance = 0 WHERE id = :id; DROP TABLE accounts`,
		`WITH gone AS (DELETE FROM orders RETURNING account) UPDATE accounts SET balance = 0 WHERE id IN (SELECT account FROM gone)`,
	} {
		err := h.NamedExec(context.Background(), q, &a)
		var re *sqlxhelpers.RewriteError
		if errors.As(err, &re) {
			fmt.Println(errors.Is(err, sqlxhelpers.ErrRewrite), re.Kind, re.Reason)
		}
	}
	// Output:
	// true no-where no top-level WHERE clause: the statement would touch every row
	// true multiple-statements more SQL after a top-level ';'
	// true cte data-modifying CTE
}

// AccountRepo is an ordinary sqlx repository: each method reads what it
// needs and writes with a version guard.
type AccountRepo struct {
	db *sqlx.DB
	h  *sqlxhelpers.Helper
}

// Deposit is one attempt: read, change, write. It returns
// *versioned.StaleError when someone else wrote the row in between.
func (r *AccountRepo) Deposit(ctx context.Context, d Deposit) (Account, error) {
	var a Account
	if err := r.db.GetContext(ctx, &a, `SELECT id, owner, balance, version FROM accounts WHERE id = $1`, d.ID); err != nil {
		return a, err
	}
	a.Balance += d.Amount
	return a, r.h.Update(ctx, "accounts", &a, sqlxhelpers.Columns("balance"))
}

type Deposit struct {
	ID, Amount int64
}

// A repository method becomes a retrying one with retry.Wrap: a stale write
// re-runs the whole method (re-read, re-apply, re-write), other errors
// return at once.
func Example_retryRepository() {
	db, mock := exampleDB()
	defer db.Close()
	h, _ := sqlxhelpers.New(db)
	repo := &AccountRepo{db: db, h: h}
	deposit := retry.Wrap(repo.Deposit, retry.WithMaxAttempts(5))

	const read = `SELECT id, owner, balance, version FROM accounts WHERE id = $1`
	const write = `UPDATE "accounts" SET "balance" = $1, "version" = "version" + 1 WHERE "id" = $2 AND "version" = $3`
	cols := []string{"id", "owner", "balance", "version"}
	// First attempt: read version 3, but a concurrent deposit wins.
	mock.ExpectQuery(read).WithArgs(int64(1)).WillReturnRows(sqlmock.NewRows(cols).AddRow(1, "ann", 100, 3))
	mock.ExpectExec(write).WithArgs(int64(110), int64(1), int64(3)).WillReturnResult(sqlmock.NewResult(0, 0))
	// Second attempt: re-read (now 150 at version 4) and write.
	mock.ExpectQuery(read).WithArgs(int64(1)).WillReturnRows(sqlmock.NewRows(cols).AddRow(1, "ann", 150, 4))
	mock.ExpectExec(write).WithArgs(int64(160), int64(1), int64(4)).WillReturnResult(sqlmock.NewResult(0, 1))

	a, err := deposit(context.Background(), Deposit{ID: 1, Amount: 10})
	fmt.Println(a.Balance, a.Version, err, mock.ExpectationsWereMet())
	// Output: 160 5 <nil> <nil>
}

// A locked transaction: the advisory lock on the key is held from before
// the function's first statement until COMMIT; a stale write inside it
// retries the whole transaction.
func ExampleHelper_Do() {
	raw, mock, _ := sqlmock.New() // regular-expression matching
	defer raw.Close()
	db := sqlx.NewDb(raw, "pgx")
	h, _ := sqlxhelpers.New(db)

	mock.ExpectBegin()
	mock.ExpectExec(`SET LOCAL lock_timeout = .2000ms.;\s*SELECT pg_catalog\.pg_advisory_xact_lock\(-?[0-9]+\)`).WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectExec(`UPDATE "accounts" SET "balance" = \$1`).WithArgs(int64(90), int64(1), int64(3)).
		WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectCommit()

	a := Account{ID: 1, Owner: "ann", Balance: 100, Version: 3}
	err := h.Do(context.Background(), advisory.KeyOf("account:1"), func(ctx context.Context, tx *sqlx.Tx) error {
		a.Balance -= 10
		return h.On(tx).Update(ctx, "accounts", &a, sqlxhelpers.Columns("balance"))
	}, txlock.WithTimeout(2*time.Second))
	fmt.Println(err, a.Version, mock.ExpectationsWereMet())
	// Output: <nil> 4 <nil>
}
