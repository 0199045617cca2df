package lease_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	"github.com/sqlock/sqlock/internal/testing/leakcheck"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// childEnv makes the test binary a worker process (see child_test.go)
// instead of running tests.
const childEnv = "LEASE_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	// The examples connect to DATABASE_URL, as a program would.
	pgtest.MainWithDSN(m)
}

// roomyTTL is the TTL of tests about anything but expiry: one no stall of
// a busy machine outlives (beside CPU hogs, a 1 s lease expired between
// its acquisition and its release).
const roomyTTL = time.Minute

// backendCase is one handle type a Manager runs on.
type backendCase struct {
	name string
	open func(t testing.TB, dsn string, opts ...lease.Option) *lease.Manager
}

var backends = []backendCase{
	{"pgxpool", func(t testing.TB, dsn string, opts ...lease.Option) *lease.Manager {
		return lease.New(openPool(t, dsn), opts...)
	}},
	{"sql-pgx", func(t testing.TB, dsn string, opts ...lease.Option) *lease.Manager {
		return lease.New(openSQL(t, "pgx", dsn), opts...)
	}},
	{"sql-libpq", func(t testing.TB, dsn string, opts ...lease.Option) *lease.Manager {
		return lease.New(openSQL(t, "postgres", dsn), opts...)
	}},
}

func forEachBackend(t *testing.T, f func(t *testing.T, bc backendCase)) {
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) { f(t, bc) })
	}
}

func openPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func openSQL(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// newDB is a fresh database with the leases table.
func newDB(t testing.TB) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t)
	if err := lease.Migrate(context.Background(), db.Pool()); err != nil {
		t.Fatal(err)
	}
	return db
}

// admin is a plain connection for inspecting and changing the server's
// state behind the package's back, closed at cleanup.
func admin(t testing.TB, db *pgtest.DB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// leakCheck must be called first in a test (see leakcheck.Check).
func leakCheck(t *testing.T) { t.Helper(); leakcheck.Check(t) }

// row is the leases table's row for name, read behind the package's back.
type row struct {
	owner     string
	token     int64
	expiresAt time.Time
	live      bool
}

func readRow(t testing.TB, conn *pgx.Conn, name string) row {
	t.Helper()
	var r row
	err := conn.QueryRow(context.Background(), `SELECT owner::text, token, expires_at, expires_at > clock_timestamp()
		FROM sqlock_leases WHERE name = $1`, name).Scan(&r.owner, &r.token, &r.expiresAt, &r.live)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// expireOnServer ends name's lease on the server, as the TTL would after a
// paused holder: the row is left as it is but for its expiry.
func expireOnServer(t testing.TB, conn *pgx.Conn, name string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(),
		`UPDATE sqlock_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
