package idem_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/leakcheck"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// childEnv makes the test binary a worker process (see child_test.go).
const childEnv = "IDEM_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	// The examples connect to DATABASE_URL, as a program would.
	pgtest.MainWithDSN(m)
}

// leakCheck must be called first in a test (see leakcheck.Check).
func leakCheck(t *testing.T) { t.Helper(); leakcheck.Check(t) }

// newDB is a fresh database with the keys table and an effects table that
// the tests' functions write to (one row per execution).
func newDB(t testing.TB) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t)
	if err := idem.Migrate(context.Background(), db.Pool()); err != nil {
		t.Fatal(err)
	}
	db.Exec(`CREATE TABLE effects (id bigserial PRIMARY KEY, key text NOT NULL, who text)`)
	return db
}

// txRunner runs f in a transaction of one driver, committing when f
// returns nil: the caller's side of idem.Do.
type txRunner struct {
	name string
	open func(t testing.TB, db *pgtest.DB) func(ctx context.Context, f func(tx any, exec func(q string, args ...any) error) error) error
}

var runners = []txRunner{
	{"pgx", func(t testing.TB, db *pgtest.DB) func(context.Context, func(any, func(string, ...any) error) error) error {
		p := openPool(t, db.DSN, nil)
		return func(ctx context.Context, f func(any, func(string, ...any) error) error) error {
			return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				return f(tx, func(q string, args ...any) error { _, err := tx.Exec(ctx, q, args...); return err })
			})
		}
	}},
	{"sql-pgx", sqlRunner("pgx")},
	{"sql-libpq", sqlRunner("postgres")},
}

func sqlRunner(driver string) func(testing.TB, *pgtest.DB) func(context.Context, func(any, func(string, ...any) error) error) error {
	return func(t testing.TB, db *pgtest.DB) func(context.Context, func(any, func(string, ...any) error) error) error {
		d := openSQL(t, driver, db.DSN)
		return func(ctx context.Context, f func(any, func(string, ...any) error) error) error {
			tx, err := d.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := f(tx, func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err }); err != nil {
				return err
			}
			return tx.Commit()
		}
	}
}

func forEachRunner(t *testing.T, f func(t *testing.T, r txRunner)) {
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) { f(t, r) })
	}
}

func openPool(t testing.TB, dsn string, w *pgtest.Wire) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 70
	if w != nil {
		// Counted: no ping of a connection that sat idle (see openFoldingDB).
		cfg.ConnConfig.DialFunc = w.Dial
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	}
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

func count(t testing.TB, db *pgtest.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool().QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
