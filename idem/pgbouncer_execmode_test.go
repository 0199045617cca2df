package idem_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// Through PgBouncer 1.18 in transaction mode, pgx's default query exec mode
// fails idem's statements with 42P05 or 26000 once two clients share a
// server connection: DoTx (on pgx, and on txlock.OpenDB's handle) and Do
// answer with an error matching sqlock.ErrUnsupported that names the cure,
// default_query_exec_mode=exec, and wraps the driver's error; with the cure
// in the DSN the same calls run fn once and replay.
func TestPgBouncerDefaultExecModeNamesTheCure(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	trap, cure := pgtest.StartPreparedTrap(t, db)
	type call func(ctx context.Context, key string) (string, error)
	forms := []struct {
		name string
		open func(dsn string) call
	}{
		{"DoTx-pgx", func(dsn string) call {
			p := openPool(t, dsn, nil)
			return func(ctx context.Context, key string) (string, error) { return dotxPgx(ctx, p, "s", key, nil, key) }
		}},
		{"DoTx-OpenDB", func(dsn string) call {
			d := openFoldingDB(t, dsn, nil)
			return func(ctx context.Context, key string) (string, error) { return dotxSQL(ctx, d, "s", key, nil, key) }
		}},
		{"Do-pgx", func(dsn string) call {
			p := openPool(t, dsn, nil)
			return func(ctx context.Context, key string) (v string, err error) {
				err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					v, err = idem.Do(ctx, tx, "s", key, nil, func(ctx context.Context) (string, error) { return key, nil })
					return err
				})
				return v, err
			}
		}},
	}
	ctx := context.Background()
	for _, f := range forms {
		for _, c := range []struct {
			dsn   string
			cured bool
		}{{trap, false}, {cure, true}} {
			name := fmt.Sprintf("%s/cured=%v", f.name, c.cured)
			t.Run(name, func(t *testing.T) {
				calls := [2]call{f.open(c.dsn), f.open(c.dsn)}
				pgtest.TakeTurnsThroughPreparedTrap(t, c.cured, func(n int) error {
					key := fmt.Sprintf("%s-%d", name, n/2) // each key twice: run, then replay
					v, err := calls[n%2](ctx, key)
					if err == nil && v != key {
						t.Fatalf("call %d: %q, want %q", n, v, key)
					}
					return err
				})
			})
		}
	}
}
