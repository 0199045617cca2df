package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

// ErrNoPgBouncer is returned when the pgbouncer binary is not installed.
var ErrNoPgBouncer = errors.New("pgtest: no pgbouncer: install it (apt-get install -y pgbouncer)")

// PgBouncerOptions tune a PgBouncer started by RunPgBouncer.
type PgBouncerOptions struct {
	// Mode is the pool_mode: "session", "transaction" (the default) or
	// "statement".
	Mode string
	// PoolSize is default_pool_size, the server connections per database
	// and user (default 20).
	PoolSize int
	// Settings are extra [pgbouncer] settings; they override the defaults.
	Settings map[string]string
}

// PgBouncer is a PgBouncer process in front of one database, owned by a
// watchdog like a Cluster: when the test binary exits in any way, the
// watchdog stops PgBouncer and removes its directory.
type PgBouncer struct {
	// DSN connects through PgBouncer to the database, as the DSN's user
	// (PgBouncer authenticates clients with auth_type=trust).
	DSN  string
	Mode string

	dir  string
	port int
	proc *serverproc.Proc // the watchdog and pgbouncer
}

// pgbouncerWatchdog starts pgbouncer, reports its pid, and on EOF of stdin
// (Close, or the test binary died) stops it — SIGTERM is PgBouncer's
// immediate shutdown — then SIGKILL after 5 s, and removes the directory.
var pgbouncerWatchdog = serverproc.Script(`bin="$1"; ini="$2"; dir="$3"
"$bin" "$ini" >>"$dir/pgbouncer.log" 2>&1 & pid=$!
echo "$pid"
while read -r cmd; do :; done
halt TERM 50
rm -rf "$dir"
`)

// StartPgBouncer runs PgBouncer in the given pool mode ("transaction" or
// "session") in front of db and returns a DSN that connects through it. It
// is stopped, and its directory removed, when the test ends. It works on an
// owned cluster and on a DATABASE_URL server alike: the server's host, port,
// user and password come from db.DSN.
func StartPgBouncer(tb testing.TB, db *DB, mode string) string {
	tb.Helper()
	b, err := RunPgBouncer(context.Background(), db.DSN, PgBouncerOptions{Mode: mode})
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { b.Close() })
	return b.DSN
}

// findPgBouncer returns the pgbouncer binary: PATH, then /usr/sbin.
func findPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoPgBouncer
}

// RunPgBouncer starts PgBouncer on a free 127.0.0.1 port in front of the
// database dsn names and waits until it accepts connections. Close stops it.
// As root it runs as the same unprivileged user as the server (PgBouncer
// refuses to run as root).
func RunPgBouncer(ctx context.Context, dsn string, opts PgBouncerOptions) (*PgBouncer, error) {
	switch opts.Mode {
	case "":
		opts.Mode = "transaction"
	case "session", "transaction", "statement":
	default:
		return nil, fmt.Errorf("pgtest: pgbouncer pool mode %q: want session, transaction or statement", opts.Mode)
	}
	bin, err := findPgBouncer()
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgtest: pgbouncer: %w", err)
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	return serverproc.Retry(ctx, func(int) (*PgBouncer, error) {
		return startPgBouncerOnce(ctx, bin, cfg, cred, opts)
	})
}

// connValue quotes a value for a libpq-style connection string as PgBouncer
// parses it.
func connValue(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func startPgBouncerOnce(ctx context.Context, bin string, cfg *pgx.ConnConfig, cred *syscall.Credential,
	opts PgBouncerOptions) (*PgBouncer, error) {
	port, err := serverproc.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := serverproc.TempDir("sqlock-pgbouncer-", cred)
	if err != nil {
		return nil, err
	}
	user := cfg.User
	target := []string{
		"host=" + connValue(cfg.Host),
		"port=" + strconv.Itoa(int(cfg.Port)),
		"dbname=" + connValue(cfg.Database),
		"user=" + connValue(user),
	}
	if cfg.Password != "" {
		target = append(target, "password="+connValue(cfg.Password))
	}
	poolSize := opts.PoolSize
	if poolSize <= 0 {
		poolSize = 20
	}
	settings := map[string]string{
		"listen_addr":               "127.0.0.1",
		"listen_port":               strconv.Itoa(port),
		"unix_socket_dir":           "",
		"auth_type":                 "trust",
		"auth_file":                 filepath.Join(dir, "userlist.txt"),
		"pool_mode":                 opts.Mode,
		"default_pool_size":         strconv.Itoa(poolSize),
		"max_client_conn":           "1000",
		"ignore_startup_parameters": "extra_float_digits",
		"server_login_retry":        "1",
		"log_connections":           "0",
		"log_disconnections":        "0",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ini strings.Builder
	// The client-side database name is the real one, so a DSN for the
	// database only changes host and port.
	fmt.Fprintf(&ini, "[databases]\n%s = %s\n\n[pgbouncer]\n", cfg.Database, strings.Join(target, " "))
	for _, k := range keys {
		fmt.Fprintf(&ini, "%s = %s\n", k, settings[k])
	}
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	files := map[string]string{
		"pgbouncer.ini": ini.String(),
		"userlist.txt":  quote(user) + " " + quote("") + "\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := serverproc.Own(cred, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "userlist.txt")); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	proc, err := serverproc.Start(dir, cred, pgbouncerWatchdog, "pgtest-pgbouncer-watchdog",
		bin, filepath.Join(dir, "pgbouncer.ini"), dir)
	if err != nil {
		return nil, fmt.Errorf("pgtest: pgbouncer: %w", err)
	}
	b := &PgBouncer{dir: dir, port: port, proc: proc, Mode: opts.Mode}
	b.DSN = fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable",
		urlUser(user), port, cfg.Database)
	if err := b.waitReady(ctx); err != nil {
		proc.Close() // the watchdog removes dir
		return nil, err
	}
	return b, nil
}

func urlUser(u string) string {
	return strings.NewReplacer("%", "%25", "@", "%40", ":", "%3A", "/", "%2F", "?", "%3F", "#", "%23").Replace(u)
}

func (b *PgBouncer) waitReady(ctx context.Context) error {
	err := serverproc.WaitReady(ctx, 30*time.Second, 25*time.Millisecond, b.proc.PID(), func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, b.DSN)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(context.Background())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("pgtest: pgbouncer %w; log: %s", err, serverproc.LogTail(filepath.Join(b.dir, "pgbouncer.log")))
	}
	return nil
}

// PID is the pgbouncer process id (0 after Close).
func (b *PgBouncer) PID() int { return b.proc.PID() }

// Port is the 127.0.0.1 port PgBouncer listens on.
func (b *PgBouncer) Port() int { return b.port }

// Dir is PgBouncer's temporary directory (configuration, userlist, log),
// removed on Close.
func (b *PgBouncer) Dir() string { return b.dir }

// Close stops PgBouncer (its clients are disconnected) and removes its
// directory, waiting until both are done.
func (b *PgBouncer) Close() error { return b.proc.Close() }

// StartPreparedTrap runs PgBouncer in transaction mode with a single server
// connection in front of db, as PgBouncer 1.18 runs it: it keeps no
// prepared statements, so the second client to prepare a statement under
// the name another client already prepared it by (pgx's default query exec
// mode names statements by their text) fails with 42P05, every time, not
// only when the pool happens to mix sessions. It returns a DSN through it
// in pgx's default mode (trap) and the same with the cure, exec mode
// (cure). It is stopped when the test ends.
func StartPreparedTrap(tb testing.TB, db *DB) (trap, cure string) {
	tb.Helper()
	b, err := RunPgBouncer(context.Background(), db.DSN, PgBouncerOptions{Mode: "transaction", PoolSize: 1})
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { b.Close() })
	return b.DSN, b.DSN + "&default_query_exec_mode=exec"
}

// CheckPreparedTrap fails tb unless err is how every sqlock package reports
// a pooler's prepared-statement failure: an error matching
// sqlock.ErrUnsupported whose text names the cure, with the driver's 42P05
// or 26000 wrapped.
func CheckPreparedTrap(tb testing.TB, err error) {
	tb.Helper()
	code := pgerror.Code(err)
	if !errors.Is(err, sqlock.ErrUnsupported) || !strings.Contains(err.Error(), "default_query_exec_mode=exec") ||
		(code != pgerror.DuplicatePrepared && code != pgerror.InvalidStatementName) {
		tb.Fatalf("want an error matching sqlock.ErrUnsupported that names default_query_exec_mode=exec and wraps 42P05 or 26000; got (SQLSTATE %q) %v", code, err)
	}
}

// TakeTurnsThroughPreparedTrap is the check of a package's calls through
// StartPreparedTrap's PgBouncer: call(n), for n from 0 to 5, is the n-th
// call, made by one of two clients taking turns on the pooler's one
// server connection (client n%2). Through the cure every call must
// succeed; through the trap every failure must be CheckPreparedTrap's
// and at least one call must fail, or the trap was not set.
func TakeTurnsThroughPreparedTrap(tb testing.TB, cured bool, call func(n int) error) {
	tb.Helper()
	failed := 0
	for n := range 6 {
		err := call(n)
		switch {
		case err == nil:
		case cured:
			tb.Fatalf("call %d with the cure: %v", n, err)
		default:
			CheckPreparedTrap(tb, err)
			failed++
		}
	}
	if !cured && failed == 0 {
		tb.Fatal("no call failed in pgx's default mode: the trap is not set")
	}
}
