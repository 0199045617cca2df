package versioned_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

// The examples run against go-sqlmock, which pins the exact statements; the
// package's tests run the same calls against a real PostgreSQL.

func ExampleUpdate() {
	db, mock, _ := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	defer db.Close()
	const update = `UPDATE "accounts" SET "balance" = $1, "version" = "version" + 1 WHERE "id" = $2 AND "version" = $3`
	mock.ExpectExec(update).WithArgs(90, 42, 7).WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectExec(update).WithArgs(80, 42, 7).WillReturnResult(sqlmock.NewResult(0, 0)) // someone else wrote first

	ctx := context.Background()
	accounts := versioned.MustTable("accounts") // key "id", version column "version", PostgreSQL
	v, err := versioned.Update(ctx, db, accounts, 42, int64(7), versioned.Set("balance", 90))
	fmt.Println(v, err)

	_, err = versioned.Update(ctx, db, accounts, 42, int64(7), versioned.Set("balance", 80))
	var stale *versioned.StaleError
	fmt.Println(errors.Is(err, versioned.ErrStale), errors.As(err, &stale) && stale.Expected == 7)
	fmt.Println(err)
	// Output:
	// 8 <nil>
	// true true
	// versioned: stale version: update of accounts key 42 at version 7
}

// A read–modify–write inside retry.Do: a stale write (RetryCause "stale")
// runs the whole function again, re-reading the row first.
func ExampleUpdate_retry() {
	db, mock, _ := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	defer db.Close()
	const read = `SELECT balance, version FROM accounts WHERE id = $1`
	const update = `UPDATE "accounts" SET "balance" = $1, "version" = "version" + 1 WHERE "id" = $2 AND "version" = $3`
	mock.ExpectQuery(read).WithArgs(42).WillReturnRows(sqlmock.NewRows([]string{"balance", "version"}).AddRow(100, 7))
	mock.ExpectExec(update).WithArgs(int64(90), 42, 7).WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectQuery(read).WithArgs(42).WillReturnRows(sqlmock.NewRows([]string{"balance", "version"}).AddRow(120, 8))
	mock.ExpectExec(update).WithArgs(int64(110), 42, 8).WillReturnResult(sqlmock.NewResult(0, 1))

	accounts := versioned.MustTable("accounts")
	attempts := 0
	err := retry.Do(context.Background(), func(ctx context.Context) error {
		attempts++
		var balance, version int64
		if err := db.QueryRowContext(ctx, read, 42).Scan(&balance, &version); err != nil {
			return err
		}
		_, err := versioned.Update(ctx, db, accounts, 42, version, versioned.Set("balance", balance-10))
		return err
	})
	fmt.Println(attempts, err, mock.ExpectationsWereMet())
	// Output: 2 <nil> <nil>
}

func ExampleDelete() {
	db, mock, _ := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	defer db.Close()
	mock.ExpectExec("DELETE FROM `carts` WHERE `user_id` = ? AND `rev` = ?").WithArgs("u1", 3).
		WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectQuery("SELECT `rev` FROM `carts` WHERE `user_id` = ? FOR UPDATE").WithArgs("u1").
		WillReturnRows(sqlmock.NewRows([]string{"rev"})) // no row: it is gone

	carts := versioned.MustTable("carts", versioned.WithDialect(versioned.MySQL),
		versioned.WithKey("user_id"), versioned.WithVersionColumn("rev"), versioned.WithProbe())
	err := versioned.Delete(context.Background(), db, carts, "u1", int32(3))
	var stale *versioned.StaleError
	if errors.As(err, &stale) {
		fmt.Println(stale.Op, stale.Gone)
	}
	// Output: delete true
}

func ExampleCompareAndSwap() {
	db, mock, _ := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	defer db.Close()
	mock.ExpectQuery(`WITH "sqlock_cas" AS (UPDATE "tasks" SET "status" = $1, "worker_id" = $2 `+
		`WHERE "id" = $3 AND "status" = $4 RETURNING 1) `+
		`SELECT (SELECT count(*) FROM "sqlock_cas"), EXISTS (SELECT 1 FROM "tasks" WHERE "id" = $3)`).
		WithArgs("claimed", "w-7", 1001, "unclaimed").
		WillReturnRows(sqlmock.NewRows([]string{"n", "exists"}).AddRow(0, true))

	tasks := versioned.MustTable("tasks")
	res, err := versioned.CompareAndSwap(context.Background(), db, tasks, 1001,
		[]versioned.Pair{versioned.Eq("status", "unclaimed")},
		versioned.Set("status", "claimed"), versioned.Set("worker_id", "w-7"))
	switch {
	case err != nil:
		fmt.Println("outcome unknown:", err)
	case res == versioned.Won:
		fmt.Println("claimed it")
	case res == versioned.Lost:
		fmt.Println("another worker claimed it first")
	case res == versioned.Missing:
		fmt.Println("no such task")
	}
	// Output: another worker claimed it first
}

func ExampleUpdateStruct() {
	db, mock, _ := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	defer db.Close()
	mock.ExpectExec(`UPDATE "documents" SET "body" = $1, "lock_version" = "lock_version" + 1 WHERE "id" = $2 AND "lock_version" = $3`).
		WithArgs("v2", 5, 1).WillReturnResult(sqlmock.NewResult(0, 1))

	type Document struct {
		ID          int
		Body        string
		LockVersion int `lock:"version"`
	}
	documents := versioned.MustTable("documents", versioned.WithVersionColumn("lock_version"))
	doc := &Document{ID: 5, Body: "v1", LockVersion: 1}
	// The struct follows the row: Body gets the value assigned to its
	// column, LockVersion the new version.
	err := versioned.UpdateStruct(context.Background(), db, documents, doc, versioned.Set("body", "v2"))
	fmt.Println(doc.Body, doc.LockVersion, err)
	// Output: v2 2 <nil>
}

// A fenced write: the row's fence column must be at most the writer's
// fencing token (here a lease's), and becomes it. After a takeover the
// new holder (token 8) has written the row; the old one (token 7) is
// refused by the database, and one query tells why.
func ExampleFence() {
	db, mock, _ := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	defer db.Close()
	const update = `UPDATE "orders" SET "status" = $1, "version" = "version" + 1, "fence" = $2 WHERE "id" = $3 AND "version" = $4 AND COALESCE("fence", 0) <= $5`
	mock.ExpectExec(update).WithArgs("paid", int64(7), 42, 3, int64(7)).WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectQuery(`SELECT "version", "fence" FROM "orders" WHERE "id" = $1`).WithArgs(42).
		WillReturnRows(sqlmock.NewRows([]string{"version", "fence"}).AddRow(4, 8))

	orders := versioned.MustTable("orders")
	token := int64(7) // l.Token() of the caller's *lease.Lease
	_, err := versioned.Update(context.Background(), db, orders, 42, 3, versioned.Set("status", "paid"), versioned.Fence("fence", token))
	fmt.Println(errors.Is(err, versioned.ErrFenced), errors.Is(err, versioned.ErrStale))
	fmt.Println(err)
	// Output:
	// true false
	// versioned: fenced out: update of orders key 42 with fencing token 7: the row's fence is 8 (a newer lock holder wrote it)
}
