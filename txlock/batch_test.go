package txlock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// TestLockStatementsPrepared: in pgx's default exec mode the lock
// statements are prepared once per connection and reused (the server's
// pg_prepared_statements lists them, once, with their execution count); in
// every other mode — exec and simple_protocol are the ones for PgBouncer in
// transaction mode — the same transactions work and nothing of txlock's is
// prepared.
func TestLockStatementsPrepared(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, withParam(db.DSN, "default_query_exec_mode="+mode))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			const n = 5
			for i := range n {
				for _, keys := range [][]advisory.Key{{advisory.KeyInt(int64(i))}, {advisory.KeyPair(1, int32(i)), advisory.KeyInt(7)}} {
					for _, opts := range [][]txlock.Option{nil, {txlock.TryOnce()}} {
						err := doPgxKeys(ctx, conn, keys, func(ctx context.Context, tx pgx.Tx) error {
							var n int
							err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks
								WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted`).Scan(&n)
							if err == nil && n != len(keys) {
								err = fmt.Errorf("%d advisory locks held inside fn, want %d", n, len(keys))
							}
							return err
						}, opts...)
						if err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			rows, err := conn.Query(ctx, `SELECT statement, generic_plans + custom_plans
				FROM pg_prepared_statements WHERE statement LIKE 'SELECT pg_catalog.pg_advisory%' ORDER BY statement`)
			if err != nil {
				t.Fatal(err)
			}
			type stmt struct {
				SQL  string
				Runs int64
			}
			got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stmt])
			if err != nil {
				t.Fatal(err)
			}
			if mode != "cache_statement" {
				if len(got) != 0 {
					t.Fatalf("%s mode: prepared %v, want nothing", mode, got)
				}
				return
			}
			// One statement per shape, each prepared once: the single key
			// (with the timeout) n times, and for the pair of keys the
			// first in canonical order (the int8 key) the same statement
			// n times more, the pair (no timeout: set once per
			// transaction) n times.
			want := map[string]int64{
				"SELECT pg_catalog.pg_advisory_xact_lock($2::int8) FROM (SELECT pg_catalog.set_config('lock_timeout', $1::text, true)) s": 2 * n,
				"SELECT pg_catalog.pg_advisory_xact_lock($1::int4, $2::int4)":                                                             n,
			}
			if len(got) != len(want) {
				t.Fatalf("prepared %v, want %v", got, want)
			}
			for _, s := range got {
				if want[s.SQL] != s.Runs {
					t.Errorf("prepared %q ran %d times, want %d (of %v)", s.SQL, s.Runs, want[s.SQL], got)
				}
			}
		})
	}
}

// TestVanishedStatementsArePreparedAgain: the batch's statements are
// prepared by name, once per connection; if they vanish from the session
// (DEALLOCATE ALL, as a pooler's reset query or a DISCARD ALL does), at
// most the next transaction fails, with SQLSTATE 26000 and nothing run,
// and every later one prepares them again and succeeds on the same
// connection.
func TestVanishedStatementsArePreparedAgain(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ran := 0
	do := func() error {
		return doPgxKeys(ctx, conn, []advisory.Key{advisory.KeyInt(1)}, func(context.Context, pgx.Tx) error { ran++; return nil })
	}
	if err := do(); err != nil {
		t.Fatal(err)
	}
	pid := conn.PgConn().PID()
	if _, err := conn.Exec(ctx, "DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	ran = 0
	failed := 0
	for range 3 {
		err := do()
		switch {
		case err == nil:
		case pgerror.Code(err) == pgerror.InvalidStatementName && failed == 0 && ran == 0:
			failed++
		default:
			t.Fatalf("after DEALLOCATE ALL: %v (%d failed before, fn ran %d times)", err, failed, ran)
		}
	}
	if ran != 3-failed || conn.PgConn().PID() != pid {
		t.Fatalf("fn ran %d times after %d failures, backend %d (was %d)", ran, failed, conn.PgConn().PID(), pid)
	}
	t.Logf("after DEALLOCATE ALL: %d transaction(s) failed with 26000, %d ran", failed, ran)
}
