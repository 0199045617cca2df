package txlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"
	"go.uber.org/goleak"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

func TestMain(m *testing.M) { pgtest.Main(m, mariatest.Close) }

// doKeys and doPgxKeys lock a set of keys: the first as the call's key, the
// others through AlsoLock.
func doKeys(ctx context.Context, db txlock.DB, keys []advisory.Key, fn func(context.Context, *sql.Tx) error, opts ...txlock.Option) error {
	key, opts := keyOpts(keys, opts)
	return txlock.Do(ctx, db, key, fn, opts...)
}

func doPgxKeys(ctx context.Context, db txlock.PgxDB, keys []advisory.Key, fn func(context.Context, pgx.Tx) error, opts ...txlock.Option) error {
	key, opts := keyOpts(keys, opts)
	return txlock.DoPgx(ctx, db, key, fn, opts...)
}

func keyOpts(keys []advisory.Key, opts []txlock.Option) (advisory.Key, []txlock.Option) {
	if len(keys) > 1 {
		opts = append([]txlock.Option{txlock.AlsoLock(keys[1:]...)}, opts...)
	}
	return keys[0], opts
}

// noLeaks checks, when the test and all its cleanups are done, that no
// goroutine it started is left. Call it first, so that its cleanup runs
// last (after pools and databases are closed).
func noLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// q is what the tests need from a transaction, whatever its driver.
type q interface {
	Exec(ctx context.Context, sql string, args ...any) error
	Int(ctx context.Context, sql string, args ...any) (int64, error)
}

type pgxQ struct{ tx pgx.Tx }

func (x pgxQ) Exec(ctx context.Context, s string, args ...any) error {
	_, err := x.tx.Exec(ctx, s, args...)
	return err
}

func (x pgxQ) Int(ctx context.Context, s string, args ...any) (n int64, err error) {
	err = x.tx.QueryRow(ctx, s, args...).Scan(&n)
	return n, err
}

type sqlQ struct{ tx *sql.Tx }

func (x sqlQ) Exec(ctx context.Context, s string, args ...any) error {
	_, err := x.tx.ExecContext(ctx, s, args...)
	return err
}

func (x sqlQ) Int(ctx context.Context, s string, args ...any) (n int64, err error) {
	err = x.tx.QueryRowContext(ctx, s, args...).Scan(&n)
	return n, err
}

// backend runs txlock through one driver and handle kind.
type backend struct {
	name string
	do   func(ctx context.Context, keys []advisory.Key, fn func(context.Context, q) error, opts ...txlock.Option) error
	// conns is the number of connections the handle holds open.
	conns func() int
}

const (
	bePgxPool = "pgxpool"
	bePgxConn = "pgx.Conn"
	beSQL     = "database/sql"
	beFold    = "database/sql+OpenDB"
	bePQ      = "lib/pq"
)

// backends opens every kind of handle on db. Each test picks the ones it
// runs on by name (all when names is empty).
func backends(t *testing.T, db *pgtest.DB, names ...string) []backend {
	t.Helper()
	return backendsFor(t, db.DSN, names...)
}

// backendsFor is backends for any DSN (PgBouncer's).
func backendsFor(t *testing.T, dsn string, names ...string) []backend {
	t.Helper()
	want := func(n string) bool { return len(names) == 0 || slices.Contains(names, n) }
	var out []backend
	if want(bePgxPool) {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 8
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		out = append(out, backend{bePgxPool, func(ctx context.Context, keys []advisory.Key, fn func(context.Context, q) error, opts ...txlock.Option) error {
			return doPgxKeys(ctx, pool, keys, func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, pgxQ{tx}) }, opts...)
		}, func() int { return int(pool.Stat().TotalConns()) }})
	}
	if want(bePgxConn) {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		var mu sync.Mutex // a *pgx.Conn is not safe for concurrent use
		out = append(out, backend{bePgxConn, func(ctx context.Context, keys []advisory.Key, fn func(context.Context, q) error, opts ...txlock.Option) error {
			mu.Lock()
			defer mu.Unlock()
			return doPgxKeys(ctx, conn, keys, func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, pgxQ{tx}) }, opts...)
		}, func() int {
			if conn.IsClosed() {
				return 0
			}
			return 1
		}})
	}
	sqlBackend := func(name string, h *sql.DB) backend {
		h.SetMaxOpenConns(8)
		h.SetMaxIdleConns(8)
		return backend{name, func(ctx context.Context, keys []advisory.Key, fn func(context.Context, q) error, opts ...txlock.Option) error {
			return doKeys(ctx, h, keys, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, sqlQ{tx}) }, opts...)
		}, func() int { return h.Stats().OpenConnections }}
	}
	if want(beSQL) || want(beFold) {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if want(beSQL) {
			h := stdlib.OpenDB(*cfg)
			t.Cleanup(func() { h.Close() })
			out = append(out, sqlBackend(beSQL, h))
		}
		if want(beFold) {
			h := txlock.OpenDB(*cfg)
			t.Cleanup(func() { h.Close() })
			out = append(out, sqlBackend(beFold, h))
		}
	}
	if want(bePQ) {
		h, err := sql.Open("postgres", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		out = append(out, sqlBackend(bePQ, h))
	}
	return out
}

// lockRow is one advisory lock as pg_locks shows it.
type lockRow struct {
	classid, objid uint32
	objsubid       int16
	mode           string
	granted        bool
}

func (r lockRow) String() string {
	return fmt.Sprintf("(%d,%d,%d %s granted=%v)", r.classid, r.objid, r.objsubid, r.mode, r.granted)
}

// advisoryLocks lists the advisory locks in db's database, in canonical
// order.
func advisoryLocks(t *testing.T, admin *pgxpool.Pool) []lockRow {
	t.Helper()
	rows, err := admin.Query(context.Background(), `
		SELECT classid::int8, objid::int8, objsubid, mode, granted FROM pg_locks
		WHERE locktype = 'advisory'
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY classid, objid, objsubid, mode`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []lockRow
	for rows.Next() {
		var c, o int64
		var r lockRow
		if err := rows.Scan(&c, &o, &r.objsubid, &r.mode, &r.granted); err != nil {
			t.Fatal(err)
		}
		r.classid, r.objid = uint32(c), uint32(o)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// expectLocks is the pg_locks rows keys give, granted, in mode.
func expectLocks(mode string, keys ...advisory.Key) []lockRow {
	var out []lockRow
	for _, k := range keys {
		c, o, s := k.Locktag()
		out = append(out, lockRow{c, o, s, mode, true})
	}
	slices.SortFunc(out, func(a, b lockRow) int {
		switch {
		case a.classid != b.classid:
			return cmpU(a.classid, b.classid)
		case a.objid != b.objid:
			return cmpU(a.objid, b.objid)
		}
		return int(a.objsubid) - int(b.objsubid)
	})
	return out
}

func cmpU(a, b uint32) int {
	if a < b {
		return -1
	}
	return 1
}

// waitNoLocks waits until db has no advisory lock left: after a
// connection was closed, the server ends its session (and its locks) as
// soon as it sees the socket close, which is asynchronous. The bound is the
// test's own deadline, not a timing assumption.
func waitNoLocks(t *testing.T, admin *pgxpool.Pool) {
	t.Helper()
	for {
		if len(advisoryLocks(t, admin)) == 0 {
			return
		}
		if dl, ok := t.Deadline(); ok && time.Until(dl) < 5*time.Second {
			t.Fatalf("advisory locks left: %v", advisoryLocks(t, admin))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holder holds advisory xact locks on a connection of its own until
// release is called.
type holder struct {
	tx   pgx.Tx
	conn *pgx.Conn
}

func holdLocks(t *testing.T, db *pgtest.DB, shared bool, keys ...advisory.Key) *holder {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fn := "pg_advisory_xact_lock"
	if shared {
		fn = "pg_advisory_xact_lock_shared"
	}
	for _, k := range keys {
		if _, err := tx.Exec(ctx, "SELECT "+fn+"("+string(k.AppendArgs(nil))+")"); err != nil {
			t.Fatal(err)
		}
	}
	h := &holder{tx, conn}
	t.Cleanup(h.release)
	return h
}

func (h *holder) release() {
	if h.conn.IsClosed() {
		return
	}
	_ = h.tx.Rollback(context.Background())
	_ = h.conn.Close(context.Background())
}

var errBoom = errors.New("boom")

func sqlTxOptionsSerializable() sql.TxOptions { return sql.TxOptions{Isolation: sql.LevelSerializable} }
