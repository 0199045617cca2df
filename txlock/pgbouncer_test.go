package txlock_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// Transaction locks work through PgBouncer in transaction mode (the Debian
// package): a transaction keeps one server connection from BEGIN to COMMIT,
// and the lock ends with it. Mutual exclusion holds across the pooler
// (exact count), pg_locks on the server shows the lock while fn runs and
// nothing after, and a timed-out or refused lock leaves the client
// connection usable. (PgBouncer 1.18 has no protocol-level prepared
// statements in transaction mode, so the clients use pgx's exec mode.)
func TestPgBouncerTransactionMode(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec("CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL)")
	admin := db.Pool()
	dsn := withParam(pgtest.StartPgBouncer(t, db, "transaction"), "default_query_exec_mode=exec")
	ctx := context.Background()
	for i, be := range backendsFor(t, dsn, bePgxPool, beSQL, beFold) {
		t.Run(be.name, func(t *testing.T) {
			id := i + 1
			db.Exec("INSERT INTO counter VALUES ($1, 0)", id)
			key := []advisory.Key{advisory.KeyPair(3, int32(id))}
			want := expectLocks("ExclusiveLock", key...)
			err := be.do(ctx, key, func(ctx context.Context, tx q) error {
				if got := advisoryLocks(t, admin); !reflect.DeepEqual(got, want) {
					t.Errorf("pg_locks through PgBouncer: %v, want %v", got, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := advisoryLocks(t, admin); len(got) != 0 {
				t.Fatalf("locks left: %v", got)
			}

			const each = 20
			run(t, workers, each, func() error {
				return be.do(ctx, key, func(ctx context.Context, tx q) error { return readThenWrite(ctx, tx, id) })
			})
			if n := counterValue(t, admin, id); n != workers*each {
				t.Fatalf("counter = %d, want %d", n, workers*each)
			}

			h := holdLocks(t, db, false, key...)
			err = be.do(ctx, key, func(context.Context, q) error { return nil }, txlock.WithTimeout(20*time.Millisecond))
			if !errors.Is(err, txlock.ErrTimeout) {
				t.Fatalf("timeout through PgBouncer: %v", err)
			}
			err = be.do(ctx, key, func(context.Context, q) error { return nil }, txlock.TryOnce())
			if !errors.Is(err, txlock.ErrNotAcquired) {
				t.Fatalf("try-once through PgBouncer: %v", err)
			}
			h.release()
			if err := be.do(ctx, key, func(context.Context, q) error { return nil }); err != nil {
				t.Fatalf("after the failures: %v", err)
			}
			if got := advisoryLocks(t, admin); len(got) != 0 {
				t.Fatalf("locks left: %v", got)
			}
		})
	}
}

// Through PgBouncer 1.18 in transaction mode, pgx's default query exec mode
// (which prepares statements by name) fails with 42P05 or 26000 as soon as
// two clients share a server connection: Do, DoPgx and Do on OpenDB's
// handle answer with an error matching sqlock.ErrUnsupported that names the
// cure, default_query_exec_mode=exec, and wraps the driver's error — fn's
// own statements' failures included — and with the cure in the DSN the
// same calls succeed.
func TestPgBouncerDefaultExecModeNamesTheCure(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec("CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL)")
	trap, cure := pgtest.StartPreparedTrap(t, db)
	ctx := context.Background()
	names := []string{bePgxPool, bePgxConn, beSQL, beFold}
	for _, c := range []struct {
		dsn   string
		cured bool
	}{{trap, false}, {cure, true}} {
		// Two clients of each kind, taking turns on PgBouncer's one server
		// connection.
		clients := [2][]backend{backendsFor(t, c.dsn, names...), backendsFor(t, c.dsn, names...)}
		for i, name := range names {
			t.Run(fmt.Sprintf("%s/cured=%v", name, c.cured), func(t *testing.T) {
				id := i + 1
				if !c.cured {
					db.Exec("INSERT INTO counter VALUES ($1, 0)", id)
				}
				key := []advisory.Key{advisory.KeyPair(4, int32(id))}
				pgtest.TakeTurnsThroughPreparedTrap(t, c.cured, func(n int) error {
					return clients[n%2][i].do(ctx, key, func(ctx context.Context, tx q) error { return readThenWrite(ctx, tx, id) })
				})
			})
		}
	}
}
