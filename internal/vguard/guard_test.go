package vguard_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/internal/vguard"
	"github.com/sqlock/sqlock/observe"
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

// One outcome for every adapter: what the probe finds decides between a
// fenced-out row, a NULL version the adapter refuses, a row that is gone
// and a stale version; only the stale results are reported, with the
// guard's Source and System.
func TestGuardOutcome(t *testing.T) {
	ctx := context.Background()
	nullErr := errors.New("NULL version")
	probe := func(ver, fence sql.NullInt64, err error) func(context.Context) (sql.NullInt64, sql.NullInt64, error) {
		return func(context.Context) (sql.NullInt64, sql.NullInt64, error) { return ver, fence, err }
	}
	at := func(n int64) sql.NullInt64 { return sql.NullInt64{Int64: n, Valid: true} }
	for _, tc := range []struct {
		name  string
		g     vguard.Guard
		check func(error) bool
		event bool
	}{
		{"fenced", vguard.Guard{Token: 3, Probe: probe(at(1), at(4), nil)},
			func(err error) bool {
				var fe *versioned.FencedError
				return errors.As(err, &fe) && fe.Token == 3 && fe.Current == 4 && !errors.Is(err, versioned.ErrStale)
			}, false},
		{"own fence", vguard.Guard{Token: 4, Probe: probe(at(2), at(4), nil)},
			func(err error) bool {
				var se *versioned.StaleError
				return errors.As(err, &se) && se.Probed && se.Current == 2
			}, true},
		{"unfenced ignores the fence", vguard.Guard{Probe: probe(at(2), at(9), nil)},
			func(err error) bool { return errors.Is(err, versioned.ErrStale) }, true},
		{"null refused", vguard.Guard{Probe: probe(sql.NullInt64{}, sql.NullInt64{}, nil), NullVersion: nullErr},
			func(err error) bool { return err == nullErr }, false},
		{"null", vguard.Guard{Probe: probe(sql.NullInt64{}, sql.NullInt64{}, nil)},
			func(err error) bool {
				var se *versioned.StaleError
				return errors.As(err, &se) && se.Probed && se.CurrentNull
			}, true},
		{"gone", vguard.Guard{Probe: probe(sql.NullInt64{}, sql.NullInt64{}, sql.ErrNoRows)},
			func(err error) bool {
				var se *versioned.StaleError
				return errors.As(err, &se) && se.Probed && se.Gone
			}, true},
		{"probe failed", vguard.Guard{Token: 2, Probe: probe(sql.NullInt64{}, sql.NullInt64{}, errBoom)},
			func(err error) bool {
				var se *versioned.StaleError
				return errors.As(err, &se) && !se.Probed && errors.Is(se.ProbeErr, errBoom) && !errors.Is(err, errBoom)
			}, true},
		{"unprobed", vguard.Guard{},
			func(err error) bool {
				var se *versioned.StaleError
				return errors.As(err, &se) && !se.Probed && se.Op == "update"
			}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &observetest.Recorder{}
			g := tc.g
			g.Table, g.Key, g.Expected, g.Observer, g.Source, g.System = "t", 1, 2, rec, "gormplugin", "mariadb"
			err := g.Outcome(ctx, 0)
			if !tc.check(err) {
				t.Fatalf("Outcome = %v", err)
			}
			ev := rec.Events()
			if !tc.event {
				if len(ev) != 0 {
					t.Fatalf("%d events for a result that is not stale", len(ev))
				}
				return
			}
			if len(ev) != 1 || ev[0].Kind != observe.Stale || ev[0].Source != "gormplugin" || ev[0].System != "mariadb" ||
				ev[0].Table != "t" || ev[0].Err != err {
				t.Fatalf("events %+v", ev)
			}
		})
	}
	if err := (vguard.Guard{Table: "t"}).Outcome(ctx, 1); err != nil {
		t.Fatalf("one row: %v", err)
	}
	var re *versioned.RowsError
	if err := (vguard.Guard{Table: "t", Key: 1}).Outcome(ctx, 2); !errors.As(err, &re) || re.Rows != 2 {
		t.Fatalf("two rows: %v", err)
	}
	rec := &observetest.Recorder{}
	err := vguard.Guard{Table: "t", Key: 1, Expected: 5, Observer: rec}.Gone(ctx)
	var se *versioned.StaleError
	if !errors.As(err, &se) || !se.Gone || !se.Probed || se.Expected != 5 || len(rec.Events()) != 1 || rec.Events()[0].Source != "versioned" {
		t.Fatalf("Gone = %v, events %+v", err, rec.Events())
	}
}

var errBoom = errors.New("connection reset")
