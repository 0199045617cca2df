package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// EnvDSN is the environment variable naming an existing server to use.
const EnvDSN = "DATABASE_URL"

var shared struct {
	once    sync.Once
	cluster *Cluster
	err     error
}

// Shared returns the cluster every test in this binary shares: DATABASE_URL
// when set, otherwise a cluster started on first use. It fails the test when
// there is no PostgreSQL (never a silent skip).
func Shared(tb testing.TB) *Cluster {
	tb.Helper()
	shared.once.Do(func() {
		if dsn := os.Getenv(EnvDSN); dsn != "" {
			shared.cluster = &Cluster{adminDSN: dsn}
			return
		}
		shared.cluster, shared.err = StartCluster(context.Background(), Options{})
	})
	if shared.err != nil {
		tb.Fatalf("pgtest: %v", shared.err)
	}
	return shared.cluster
}

// Main runs the tests of a package and then closes the shared cluster, so
// the server is gone before go test reports. Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Without it the watchdog still removes the cluster when the binary exits.
// The after functions run once the tests are done, before the cluster is
// closed (mariatest.Close, for a package that also tests on MariaDB).
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	if shared.cluster != nil {
		shared.cluster.Close()
	}
	os.Exit(code)
}

// MainWithDSN is Main for a package whose Examples connect to DATABASE_URL,
// as a program would: when it is not set, it starts a cluster, sets
// DATABASE_URL to it for the tests and Examples, and closes it once they
// are done. Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.MainWithDSN(m) }
func MainWithDSN(m *testing.M, after ...func()) {
	if os.Getenv(EnvDSN) == "" {
		c, err := StartCluster(context.Background(), Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv(EnvDSN, c.AdminDSN())
		after = append(after, func() { c.Close() })
	}
	Main(m, after...)
}

// NewCluster starts a private cluster for tests that stop or restart the
// server, closed when the test ends.
func NewCluster(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	c, err := StartCluster(context.Background(), opts)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// DB is a fresh database of its own for one test.
type DB struct {
	Cluster *Cluster
	Name    string
	// DSN connects to this database; it works with pgx, pgx stdlib and
	// lib/pq.
	DSN  string
	tb   testing.TB
	once sync.Once
	sql  *sql.DB
	pool *pgxpool.Pool
}

// New creates a database on the shared cluster, dropped when the test ends.
func New(tb testing.TB) *DB {
	tb.Helper()
	return Shared(tb).NewDB(tb)
}

// NewDB creates a database on c, dropped (with its connections) when the
// test ends.
func (c *Cluster) NewDB(tb testing.TB) *DB {
	tb.Helper()
	name, err := c.CreateDatabase(context.Background())
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	d := &DB{Cluster: c, Name: name, DSN: WithDatabase(c.adminDSN, name), tb: tb}
	tb.Cleanup(func() {
		if d.pool != nil {
			d.pool.Close()
		}
		if d.sql != nil {
			d.sql.Close()
		}
		if err := c.DropDatabase(context.Background(), name); err != nil {
			tb.Logf("pgtest: %v", err)
		}
	})
	return d
}

// CreateDatabase creates an empty UTF-8, C-collation database with a unique
// name and returns the name.
func (c *Cluster) CreateDatabase(ctx context.Context) (string, error) {
	var b [6]byte
	rand.Read(b[:])
	name := "sqlock_" + hex.EncodeToString(b[:])
	err := c.admin(ctx, fmt.Sprintf(
		"CREATE DATABASE %s TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'", name))
	if err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	return name, nil
}

// DropDatabase drops a database made by CreateDatabase, ending its sessions.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	if err := c.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

func (c *Cluster) admin(ctx context.Context, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// TerminateBackend ends the server process with the given pid, as an
// administrator's pg_terminate_backend would (the client sees SQLSTATE 57P01
// or a broken connection).
func (c *Cluster) TerminateBackend(ctx context.Context, pid uint32) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("pgtest: pg_terminate_backend(%d) returned false", pid)
	}
	return nil
}

// SQL returns a *sql.DB (pgx stdlib driver) for this database, closed when
// the test ends.
func (d *DB) SQL() *sql.DB {
	d.open()
	return d.sql
}

// Pool returns a *pgxpool.Pool for this database, closed when the test ends.
func (d *DB) Pool() *pgxpool.Pool {
	d.open()
	return d.pool
}

func (d *DB) open() {
	d.once.Do(func() {
		d.sql = d.OpenSQL()
		d.pool = d.OpenPool(nil)
	})
}

// OpenSQL opens another *sql.DB on this database (pgx stdlib), closed when
// the test ends before the database is dropped.
func (d *DB) OpenSQL() *sql.DB {
	d.tb.Helper()
	cfg, err := pgx.ParseConfig(d.DSN)
	if err != nil {
		d.tb.Fatalf("pgtest: %v", err)
	}
	db := stdlib.OpenDB(*cfg)
	d.tb.Cleanup(func() { db.Close() })
	return db
}

// OpenPool opens another pool on this database; configure, when not nil,
// may change the configuration first.
func (d *DB) OpenPool(configure func(*pgxpool.Config)) *pgxpool.Pool {
	d.tb.Helper()
	cfg, err := pgxpool.ParseConfig(d.DSN)
	if err != nil {
		d.tb.Fatalf("pgtest: %v", err)
	}
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		d.tb.Fatalf("pgtest: %v", err)
	}
	d.tb.Cleanup(pool.Close)
	return pool
}

// Exec runs statements on this database through a short-lived connection
// and fails the test on error; for schema set-up.
func (d *DB) Exec(sql string, args ...any) {
	d.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.DSN)
	if err != nil {
		d.tb.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		d.tb.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// WithDatabase returns dsn (URL or keyword/value form) naming database
// instead of the one it names.
func WithDatabase(dsn, database string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err == nil {
			u.Path = "/" + database
			u.RawPath = ""
			return u.String()
		}
	}
	// In keyword/value form the last occurrence of a keyword wins.
	return dsn + " dbname=" + database
}

// Latency measures, now, how long this machine takes for one round trip
// to the server, scheduling included: the slowest of a few SELECT 1 on a
// connection of its own, and of a few 1 ms timer sleeps' overshoot. Tests
// scale their timing windows by it, so that a busy machine (CI, other
// processes using the CPU) widens them instead of failing them. It is at
// least 100 µs.
func (d *DB) Latency() time.Duration {
	d.tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.DSN)
	if err != nil {
		d.tb.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	worst := 100 * time.Microsecond
	for range 5 {
		start := time.Now()
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			d.tb.Fatalf("pgtest: %v", err)
		}
		worst = max(worst, time.Since(start))
		start = time.Now()
		time.Sleep(time.Millisecond)
		worst = max(worst, time.Since(start)-time.Millisecond)
	}
	return worst
}
