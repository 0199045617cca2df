package advisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/leakcheck"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// childEnv makes the test binary a worker process of
// TestExclusionAcrossProcesses instead of running tests.
const childEnv = "ADVISORY_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(exclusionChild())
	}
	// The examples connect to DATABASE_URL, as a program would.
	pgtest.MainWithDSN(m)
}

// backends are the two handle types a Locker runs on, plus lib/pq for the
// database/sql path with another driver.
type backendCase struct {
	name string
	// open returns a Locker on a fresh pool of db (closed at cleanup).
	open func(t testing.TB, db *pgtest.DB, opts ...advisory.Option) *advisory.Locker
}

var backends = []backendCase{
	{"sql-pgx", func(t testing.TB, db *pgtest.DB, opts ...advisory.Option) *advisory.Locker {
		return advisory.New(db.OpenSQL(), opts...)
	}},
	{"pgxpool", func(t testing.TB, db *pgtest.DB, opts ...advisory.Option) *advisory.Locker {
		// One connection per held or waiting lock: pgxpool's default
		// (4 on small machines) is too few for these tests.
		return advisory.NewPool(pgxPoolWith(t, db, 32), opts...)
	}},
	// The pool the txlock guide recommends: pgx's stdlib driver behind
	// txlock's connector, whose connections are not *stdlib.Conn.
	{"sql-txlock-OpenDB", func(t testing.TB, db *pgtest.DB, opts ...advisory.Option) *advisory.Locker {
		cfg, err := pgx.ParseConfig(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		h := txlock.OpenDB(*cfg)
		t.Cleanup(func() { h.Close() })
		return advisory.New(h, opts...)
	}},
	{"sql-libpq", func(t testing.TB, db *pgtest.DB, opts ...advisory.Option) *advisory.Locker {
		return advisory.New(openLibPQ(t, db.DSN), opts...)
	}},
}

func openLibPQ(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func forEachBackend(t *testing.T, f func(t *testing.T, bc backendCase)) {
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) { f(t, bc) })
	}
}

// tb is what the helpers below need of a test: a *testing.T, or a
// *rapid.T in a model-based test.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// admin is a plain connection for inspecting the server, closed at cleanup.
func admin(t testing.TB, db *pgtest.DB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// advisoryLocks counts advisory locks (granted or awaited) in db's
// database; advisory locks are per database.
const advisoryLocksSQL = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

func advisoryLocks(t tb, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), advisoryLocksSQL).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitNoLocks waits until db's database holds no advisory lock. Sessions of
// destroyed connections end asynchronously on the server, so this polls,
// for as long as it takes: a lock that never goes is a hang, which go
// test's -timeout ends with every goroutine's stack. Every 30 s it logs
// what is still held.
func waitNoLocks(t testing.TB, conn *pgx.Conn) {
	t.Helper()
	waitUntil(t, "no advisory lock is left", func() bool { return advisoryLocks(t, conn) == 0 },
		func() string {
			rows, _ := conn.Query(context.Background(), `SELECT pid, mode, granted, classid, objid, objsubid
				FROM pg_locks WHERE locktype = 'advisory'
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
			var desc string
			for rows.Next() {
				v, _ := rows.Values()
				desc += fmt.Sprint(v) + "\n"
			}
			rows.Close()
			return desc
		})
}

// holderPIDs returns the backends holding (granted) key.
func holderPIDs(t tb, conn *pgx.Conn, key advisory.Key) []uint32 {
	t.Helper()
	classid, objid, objsubid := key.Locktag()
	rows, err := conn.Query(context.Background(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1 AND objid = $2 AND objsubid = $3 AND granted`,
		int64(classid), int64(objid), objsubid)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// waiting reports how many sessions wait for key.
func waiting(t testing.TB, conn *pgx.Conn, key advisory.Key) int {
	t.Helper()
	classid, objid, objsubid := key.Locktag()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1 AND objid = $2 AND objsubid = $3 AND NOT granted`,
		int64(classid), int64(objid), objsubid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitUntil polls cond until it holds, for as long as it takes — the
// conditions awaited are what a server or a goroutine does next, which a
// busy machine delays but does not prevent, so a bound here would be a
// timing window; a condition that never comes is a hang, which go test's
// -timeout ends with every goroutine's stack. Every 30 s it logs what it
// waits for, and what describe says, if given.
func waitUntil(t tb, what string, cond func() bool, describe ...func() string) {
	t.Helper()
	next := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(next) {
			next = time.Now().Add(30 * time.Second)
			var desc string
			for _, d := range describe {
				desc += d()
			}
			t.Logf("still waiting until %s\n%s", what, desc)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leakCheck must be called first in a test (see leakcheck.Check).
func leakCheck(t *testing.T) { t.Helper(); leakcheck.Check(t) }

// pgxPoolWith opens a pgx pool on db with the given maximum size.
func pgxPoolWith(t testing.TB, db *pgtest.DB, maxConns int32) *pgxpool.Pool {
	return db.OpenPool(func(c *pgxpool.Config) { c.MaxConns = maxConns })
}
