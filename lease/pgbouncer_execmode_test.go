package lease_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// Through PgBouncer 1.18 in transaction mode, pgx's default query exec mode
// fails the Manager's statements with 42P05 or 26000 once two clients share
// a server connection: TryAcquire and Release answer with an error matching
// sqlock.ErrUnsupported that names the cure, default_query_exec_mode=exec,
// and wraps the driver's error; with the cure in the DSN they succeed.
func TestPgBouncerDefaultExecModeNamesTheCure(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	trap, cure := pgtest.StartPreparedTrap(t, db)
	ctx := context.Background()
	for _, bc := range backends[:2] { // pgx's drivers; lib/pq prepares unnamed statements
		for _, c := range []struct {
			dsn   string
			cured bool
		}{{trap, false}, {cure, true}} {
			name := bc.name + "/trap"
			if c.cured {
				name = bc.name + "/cured"
			}
			t.Run(name, func(t *testing.T) {
				ms := [2]*lease.Manager{bc.open(t, c.dsn), bc.open(t, c.dsn)}
				failed := 0
				check := func(n int, err error) {
					switch {
					case err == nil:
					case c.cured:
						t.Fatalf("call %d with the cure: %v", n, err)
					default:
						pgtest.CheckPreparedTrap(t, err)
						failed++
					}
				}
				for n := range 6 {
					l, err := ms[n%2].TryAcquire(ctx, "execmode-"+name, roomyTTL)
					check(n, err)
					if err == nil {
						check(n, l.Release(ctx))
					}
				}
				if !c.cured && failed == 0 {
					t.Fatal("no call failed in pgx's default mode: the trap is not set")
				}
			})
		}
	}
}

// Guard runs in the caller's transaction, not on the Manager's pool, so
// its statement meets the same trap there: two pools in pgx's default mode
// sharing PgBouncer's one server connection, each guarding in turn, get
// the error that names the cure, never the bare 42P05.
func TestPgBouncerDefaultExecModeGuardNamesTheCure(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	trap, _ := pgtest.StartPreparedTrap(t, db)
	ctx := context.Background()
	l, err := backends[0].open(t, db.DSN).TryAcquire(ctx, "execmode-guard", roomyTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	var pools [2]*pgxpool.Pool
	for i := range pools {
		if pools[i], err = pgxpool.New(ctx, trap); err != nil {
			t.Fatal(err)
		}
		defer pools[i].Close()
	}
	failed := 0
	for n := range 6 {
		tx, err := pools[n%2].Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) // before the pools close, should the check fail
		if err := l.Guard(ctx, tx); err != nil {
			pgtest.CheckPreparedTrap(t, err)
			failed++
		}
		tx.Rollback(ctx)
	}
	if failed == 0 {
		t.Fatal("no guard failed in pgx's default mode: the trap is not set")
	}
}
