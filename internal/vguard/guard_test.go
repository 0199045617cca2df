package vguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/internal/vguard"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Zero rows affected by a hand-written versioned statement is never
// silent: it is a *versioned.StaleError, reported to the observer.
func TestGuardCheckHandWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL DEFAULT 0)`)
	pg.Exec(`INSERT INTO accounts (id, balance, version) VALUES (1, 100, 0), (2, 50, 7)`)
	db := pg.SQL()
	rec := &observetest.Recorder{}
	const q = `UPDATE accounts SET balance = balance - $1, version = version + 1 WHERE id = $2 AND version = $3 AND balance >= $1`
	g := vguard.Guard{Table: "accounts", Key: int64(1), Expected: 0, Observer: rec}
	res, err := db.ExecContext(ctx, q, 30, 1, 0)
	if err := g.Check(ctx, res, err); err != nil {
		t.Fatal(err)
	}
	res, err = db.ExecContext(ctx, q, 30, 1, 0)
	err = g.Check(ctx, res, err)
	var se *versioned.StaleError
	if !errors.As(err, &se) || se.Op != "update" || se.Expected != 0 || len(rec.Events()) != 1 {
		t.Fatalf("stale hand-written update: %v, %d events", err, len(rec.Events()))
	}
	res, err = db.ExecContext(ctx, `DELETE FROM accounts WHERE id = $1 AND version = $2`, 2, 1)
	err = vguard.Guard{Table: "accounts", Key: 2, Expected: 1, Op: "delete"}.Check(ctx, res, err)
	if !errors.As(err, &se) || se.Op != "delete" {
		t.Fatalf("stale hand-written delete: %v", err)
	}
	// A statement error passes through untouched, with its SQLSTATE.
	res, err = db.ExecContext(ctx, `UPDATE nosuch SET x = 1`)
	if err := g.Check(ctx, res, err); retry.SQLState(err) != "42P01" {
		t.Fatalf("statement error: %v", err)
	}
}

func TestGuardCheckResultErrors(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("disk I/O error")
	if err := (vguard.Guard{Table: "x"}).Check(ctx, sqlmock.NewErrorResult(boom), nil); !errors.Is(err, boom) {
		t.Fatalf("Check with a failing RowsAffected: %v", err)
	}
	if err := (vguard.Guard{Table: "x"}).Check(ctx, nil, nil); !errors.Is(err, versioned.ErrInvalidArg) {
		t.Fatalf("Check(nil, nil): %v", err)
	}
	if err := (vguard.Guard{Table: "x", Key: 1}).Check(ctx, sqlmock.NewResult(0, 3), nil); !errors.Is(err, versioned.ErrKeyNotUnique) {
		t.Fatalf("Check of 3 rows: %v", err)
	}
}
