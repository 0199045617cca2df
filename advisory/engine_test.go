package advisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/hash"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// TestPgBouncer: behind PgBouncer in transaction mode session locks are
// refused with ErrUnsupported, whose text names what works there (packages
// lease and txlock), and nothing is left locked; in session mode
// they work and exclude a direct connection's holder too.
func TestPgBouncer(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	conn := admin(t, db)
	key := advisory.KeyOf("pgbouncer")

	t.Run("transaction mode", func(t *testing.T) {
		leakCheck(t)
		dsn := pgtest.StartPgBouncer(t, db, "transaction")
		for name, l := range map[string]*advisory.Locker{
			"sql-pgx":   advisory.New(openSQL(t, "pgx", dsn)),
			"sql-libpq": advisory.New(openSQL(t, "postgres", dsn)),
			"pgxpool":   advisory.NewPool(openPool(t, dsn)),
			// What pgx users behind PgBouncer < 1.21 configure.
			"pgxpool-simple": advisory.NewPool(openPool(t, dsn+"&default_query_exec_mode=simple_protocol")),
			"pgxpool-exec":   advisory.NewPool(openPool(t, dsn+"&default_query_exec_mode=exec")),
		} {
			for op, f := range map[string]func(context.Context, advisory.Key) (*advisory.Lock, error){
				"Lock": l.Lock, "TryLock": l.TryLock, "RLock": l.RLock,
			} {
				if lk, err := f(ctx, key); !errors.Is(err, sqlock.ErrUnsupported) {
					if lk != nil {
						lk.Release(ctx)
					}
					t.Fatalf("%s: %s through PgBouncer in transaction mode: %v, want ErrUnsupported", name, op, err)
				}
			}
			err := l.Verify(ctx)
			if !errors.Is(err, sqlock.ErrUnsupported) || !strings.Contains(err.Error(), "package lease") ||
				!strings.Contains(err.Error(), "package txlock") {
				t.Fatalf("%s: Verify: %v, want ErrUnsupported pointing to packages lease and txlock", name, err)
			}
			t.Logf("%s: %v", name, err)
		}
		if n := advisoryLocks(t, conn); n != 0 {
			t.Fatalf("%d advisory locks left behind PgBouncer", n)
		}
	})

	t.Run("session mode", func(t *testing.T) {
		leakCheck(t)
		dsn := pgtest.StartPgBouncer(t, db, "session")
		direct := advisory.NewPool(openPool(t, db.DSN)) // closed with this subtest
		for name, l := range map[string]*advisory.Locker{
			"sql-pgx": advisory.New(openSQL(t, "pgx", dsn)),
			"pgxpool": advisory.NewPool(openPool(t, dsn)),
		} {
			if err := l.Verify(ctx); err != nil {
				t.Fatalf("%s: Verify through PgBouncer in session mode: %v", name, err)
			}
			lk := mustLock(t)(l.Lock(ctx, key))
			if _, err := direct.TryLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
				t.Fatalf("%s: a direct TryLock while held through PgBouncer: %v, want ErrNotAcquired", name, err)
			}
			if _, err := l.TryLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
				t.Fatalf("%s: a second TryLock through PgBouncer: %v, want ErrNotAcquired", name, err)
			}
			mustRelease(t, lk)
			mustRelease(t, mustLock(t)(direct.TryLock(ctx, key)))
		}
		waitNoLocks(t, conn)
	})
}

func openSQL(t testing.TB, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// fakeEngine is a database/sql driver for engines that are not
// PostgreSQL: it answers the probe as it is told. It stands in for engine
// identification only — locking is always tested on a real server.
type fakeEngine struct {
	version string
	hashOff int64 // added to the hashes the engine reports
	err     error // returned by every query, if set
	queries atomic.Int64
}

func (f *fakeEngine) Connect(context.Context) (driver.Conn, error) { return fakeConn{f}, nil }
func (f *fakeEngine) Driver() driver.Driver                        { return nil }

type fakeConn struct{ f *fakeEngine }

func (c fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no prepare") }
func (c fakeConn) Close() error                        { return nil }
func (c fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("fake: no transactions") }

func (c fakeConn) QueryContext(_ context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.f.queries.Add(1)
	if c.f.err != nil {
		return nil, c.f.err
	}
	if !strings.Contains(query, "version()") || len(args) != 2 {
		return &fakeRows{cols: []string{"x"}, row: []driver.Value{true}}, nil // the stubs: always "true"
	}
	text := args[0].Value.(string)
	return &fakeRows{cols: []string{"version", "pid", "h32", "h64", "set"}, row: []driver.Value{
		c.f.version, int64(1), int64(hash.Text(text)) + c.f.hashOff, hash.TextExtended(text, 0) + c.f.hashOff, args[1].Value,
	}}, nil
}

type fakeRows struct {
	cols []string
	row  []driver.Value
	done bool
}

func (r *fakeRows) Columns() []string { return r.cols }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	copy(dest, r.row)
	return nil
}

func TestUnsupportedEngines(t *testing.T) {
	ctx := context.Background()
	for name, f := range map[string]*fakeEngine{
		"CockroachDB": {version: "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)"},
		"other hash":  {version: "PostgreSQL 17.2", hashOff: 1},
		"MySQL":       {err: errors.New("Error 1064: You have an error in your SQL syntax near 'pg_catalog.version()'")},
	} {
		t.Run(name, func(t *testing.T) {
			l := advisory.New(sql.OpenDB(f))
			if _, err := l.TryLock(ctx, advisory.KeyInt(1)); !errors.Is(err, sqlock.ErrUnsupported) {
				t.Fatalf("TryLock: %v, want ErrUnsupported", err)
			}
			n := f.queries.Load()
			if _, err := l.Lock(ctx, advisory.KeyInt(1)); !errors.Is(err, sqlock.ErrUnsupported) {
				t.Fatalf("Lock: %v, want ErrUnsupported", err)
			}
			if err := l.Verify(ctx); !errors.Is(err, sqlock.ErrUnsupported) {
				t.Fatalf("Verify: %v, want ErrUnsupported", err)
			}
			if f.queries.Load() != n {
				t.Fatal("the refusal was not remembered: the engine was queried again")
			}
		})
	}
}
