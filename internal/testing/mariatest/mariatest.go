package mariatest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

// EnvDSN is the environment variable naming an existing server to use.
const EnvDSN = "MYSQL_URL"

// ErrNoMariaDB is returned when neither MYSQL_URL nor the MariaDB server
// binaries are available.
var ErrNoMariaDB = errors.New("mariatest: no MariaDB: set MYSQL_URL or install the server (scripts/ensure-deps.sh mariadb-server)")

// Server is a MariaDB or MySQL server for tests: one this process started
// (owned) or the one MYSQL_URL names.
type Server struct {
	cfg *mysql.Config // the admin connection, no database

	// Set only for an owned server.
	dir  string
	port int
	proc *serverproc.Proc // the watchdog and mariadbd
}

var shared struct {
	once   sync.Once
	server *Server
	err    error
}

// Shared returns the server every test in this binary shares: MYSQL_URL
// when set, otherwise one started on first use. It fails the test when
// there is no server (never a silent skip).
func Shared(tb testing.TB) *Server {
	tb.Helper()
	shared.once.Do(func() {
		if dsn := os.Getenv(EnvDSN); dsn != "" {
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				shared.err = fmt.Errorf("%s: %w", EnvDSN, err)
				return
			}
			shared.server = &Server{cfg: cfg}
			return
		}
		shared.server, shared.err = Start(context.Background())
	})
	if shared.err != nil {
		tb.Fatalf("mariatest: %v", shared.err)
	}
	return shared.server
}

// Close stops the shared server if this process started one; for TestMain
// (pgtest.Main(m, mariatest.Close)).
func Close() {
	if shared.server != nil {
		shared.server.Close()
	}
}

// DB is a database of its own for one test.
type DB struct {
	Server *Server
	Name   string
	// DSN connects to this database with go-sql-driver/mysql's defaults.
	DSN  string
	tb   testing.TB
	once sync.Once
	sql  *sql.DB
}

// New creates a database on the shared server, dropped when the test ends.
func New(tb testing.TB) *DB {
	tb.Helper()
	s := Shared(tb)
	var b [6]byte
	rand.Read(b[:])
	name := "sqlock_" + hex.EncodeToString(b[:])
	if err := s.admin("CREATE DATABASE " + name); err != nil {
		tb.Fatalf("mariatest: create database: %v", err)
	}
	cfg := s.cfg.Clone()
	cfg.DBName = name
	d := &DB{Server: s, Name: name, DSN: cfg.FormatDSN(), tb: tb}
	tb.Cleanup(func() {
		if d.sql != nil {
			d.sql.Close()
		}
		if err := s.admin("DROP DATABASE IF EXISTS " + name); err != nil {
			tb.Logf("mariatest: drop database %s: %v", name, err)
		}
	})
	return d
}

// DSNWith returns the database's DSN with extra parameters
// ("clientFoundRows=true", "parseTime=true").
func (d *DB) DSNWith(params ...string) string {
	d.tb.Helper()
	cfg, err := mysql.ParseDSN(d.DSN)
	if err != nil {
		d.tb.Fatalf("mariatest: %v", err)
	}
	for _, p := range params {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "clientFoundRows":
			cfg.ClientFoundRows = v == "true"
		case "parseTime":
			cfg.ParseTime = v == "true"
		default:
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[k] = v
		}
	}
	return cfg.FormatDSN()
}

// SQL returns a *sql.DB on this database (default DSN), closed when the
// test ends.
func (d *DB) SQL() *sql.DB {
	d.once.Do(func() { d.sql = d.Open(d.DSN) })
	return d.sql
}

// Open opens another *sql.DB with dsn, closed when the test ends.
func (d *DB) Open(dsn string) *sql.DB {
	d.tb.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		d.tb.Fatalf("mariatest: %v", err)
	}
	d.tb.Cleanup(func() { db.Close() })
	return db
}

// Exec runs statements on this database and fails the test on error; for
// schema set-up.
func (d *DB) Exec(query string, args ...any) {
	d.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.SQL().ExecContext(ctx, query, args...); err != nil {
		d.tb.Fatalf("mariatest: %s: %v", query, err)
	}
}

func (s *Server) admin(query string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := mysql.NewConnector(s.cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	_, err = db.ExecContext(ctx, query)
	return err
}

// Owned reports whether this process started the server.
func (s *Server) Owned() bool { return s.proc != nil }

// AdminDSN connects as an administrator, to no database.
func (s *Server) AdminDSN() string { return s.cfg.FormatDSN() }

// watchdogScript starts mariadbd and, when its stdin reaches EOF (the test
// binary closed the pipe or died), stops it (a clean shutdown, then SIGKILL
// after 15 s) and removes the directory.
var watchdogScript = serverproc.Script(`dir="$1"; shift
"$@" >>"$dir/mariadbd.log" 2>&1 & pid=$!
echo "$pid"
while read -r _; do :; done
halt TERM 150
rm -rf "$dir"
`)

// Start installs and starts a new server owned by this process. Close
// stops it and removes its directory; if the process dies first, the
// watchdog does the same.
func Start(ctx context.Context) (*Server, error) {
	bin, installDB, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := serverproc.Credential("mysql", "nobody")
	if err != nil {
		return nil, fmt.Errorf("mariatest: %w", err)
	}
	return serverproc.Retry(ctx, func(int) (*Server, error) { return startOnce(ctx, bin, installDB, cred) })
}

func startOnce(ctx context.Context, bin, installDB string, cred *syscall.Credential) (*Server, error) {
	dir, err := serverproc.TempDir("sqlock-maria-", cred)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	install := exec.CommandContext(ctx, installDB, "--no-defaults", "--datadir="+data,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve")
	install.Dir = dir
	install.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := install.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mariatest: mariadb-install-db: %w\n%s", err, out)
	}
	port, err := serverproc.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	proc, err := serverproc.Start(dir, cred, watchdogScript, "mariatest-watchdog", dir, bin, "--no-defaults",
		"--datadir="+data, "--socket="+filepath.Join(dir, "sock"), "--port="+strconv.Itoa(port),
		"--bind-address=127.0.0.1", "--skip-name-resolve", "--pid-file="+filepath.Join(dir, "mariadbd.pid"),
		"--skip-log-bin", "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0",
		"--performance-schema=0", "--max-connections=300", "--innodb-buffer-pool-size=64M",
		// A test that provokes a lock wait must not hang for the default 50 s.
		"--innodb-lock-wait-timeout=20")
	if err != nil {
		return nil, fmt.Errorf("mariatest: %w", err)
	}
	s := &Server{dir: dir, port: port, proc: proc, cfg: adminConfig(port)}
	if err := s.waitReady(ctx); err != nil {
		proc.Close() // the watchdog removes dir
		return nil, err
	}
	return s, nil
}

func adminConfig(port int) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = "127.0.0.1:" + strconv.Itoa(port)
	return cfg
}

func (s *Server) waitReady(ctx context.Context) error {
	c, err := mysql.NewConnector(s.cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	if err := serverproc.WaitReady(ctx, 60*time.Second, 25*time.Millisecond, s.proc.PID(), db.PingContext); err != nil {
		return fmt.Errorf("mariatest: mariadbd %w; log: %s", err,
			serverproc.LogTail(filepath.Join(s.dir, "mariadbd.log")))
	}
	return nil
}

// Close stops an owned server and removes its directory, waiting until
// both are done. It does nothing for a MYSQL_URL server.
func (s *Server) Close() error {
	if !s.Owned() {
		return nil
	}
	return s.proc.Close()
}

// findBinaries returns mariadbd and mariadb-install-db: PATH, then
// Debian's /usr/sbin and /usr/bin.
func findBinaries() (server, install string, err error) {
	look := func(name string, dirs ...string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, d := range dirs {
			p := filepath.Join(d, name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
		}
		return ""
	}
	server = look("mariadbd", "/usr/sbin", "/usr/bin")
	install = look("mariadb-install-db", "/usr/bin", "/usr/sbin")
	if server == "" || install == "" {
		return "", "", ErrNoMariaDB
	}
	return server, install, nil
}

// Dir is the temporary directory of an owned server, removed on Close.
func (s *Server) Dir() string { return s.dir }

// EnvIncrements scales the no-lost-update tests down for local iteration:
// the increments each of the 32 goroutines makes (default 300; CI runs the
// default).
const EnvIncrements = "SQLOCK_MYSQL_INCREMENTS"

// Increments is the number of increments per goroutine in a no-lost-update
// test: EnvIncrements when set to a positive number, else 300.
func Increments() int {
	if n, err := strconv.Atoi(os.Getenv(EnvIncrements)); err == nil && n > 0 {
		return n
	}
	return 300
}
