package sqlxhelpers_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/versioned"
)

// TestStaleEventSystem: a stale struct write and a stale NamedExec report
// the database the handle's driver name says in observe.Event.System, as
// OpenTelemetry's db.system.name spells it: "postgresql" for pgx and lib/pq,
// "mysql" for go-sql-driver/mysql on MariaDB (one driver serves both).
func TestStaleEventSystem(t *testing.T) {
	check := func(t *testing.T, db *sqlx.DB, system string) {
		ctx := context.Background()
		rec := &observetest.Recorder{}
		h := newHelper(t, db, sqlxhelpers.WithObserver(rec))
		db.MustExec(`INSERT INTO accounts (id, owner, balance, version) VALUES (1, 'ann', 100, 3)`)
		a := Account{ID: 1, Owner: "ann", Balance: 1, Version: 2}
		if err := h.Update(ctx, "accounts", &a); !errors.Is(err, versioned.ErrStale) {
			t.Fatalf("stale Update: %v", err)
		}
		if err := h.NamedExec(ctx, `UPDATE accounts SET balance = :balance WHERE id = :id`, &a); !errors.Is(err, versioned.ErrStale) {
			t.Fatalf("stale NamedExec: %v", err)
		}
		ev := rec.Events()
		if len(ev) != 2 {
			t.Fatalf("%d events, want 2", len(ev))
		}
		for _, e := range ev {
			if e.Kind != observe.Stale || e.Source != "versioned" || e.System != system || e.Table != "accounts" || !errors.Is(e.Err, versioned.ErrStale) {
				t.Fatalf("event %+v, want a stale event with System %q", e, system)
			}
		}
	}
	drivers(t, accountsDDL, func(t *testing.T, db *sqlx.DB) { check(t, db, "postgresql") })
	t.Run("mariadb", func(t *testing.T) { check(t, openMySQL(t, myAccountsDDL), "mysql") })
}
