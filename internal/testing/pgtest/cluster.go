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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

// ErrNotOwned is returned by the levers that need the server process (Stop,
// Start, Restart) on a cluster given by DATABASE_URL.
var ErrNotOwned = errors.New("pgtest: the cluster was not started by this process")

// ErrNoPostgres is returned when neither DATABASE_URL nor PostgreSQL server
// binaries are available.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL: set DATABASE_URL or install the server (apt-get install -y postgresql)")

// Cluster is a PostgreSQL server for tests: either one this process started
// (owned) or the one DATABASE_URL names.
type Cluster struct {
	adminDSN string // connects as a superuser to the maintenance database

	// Set only for an owned cluster.
	dir  string // temporary directory: data/, the socket, postgres.log
	port int
	proc *serverproc.Proc // the watchdog and the postmaster
}

// Options tune a cluster started by StartCluster.
type Options struct {
	// Settings are passed to postgres as -c name=value and override the
	// defaults (fsync=off, full_page_writes=off, max_connections=300).
	Settings map[string]string
}

// watchdog starts postgres, obeys "stop"/"start" lines on stdin, and on EOF
// (the test binary closed the pipe or died) stops the server (fast
// shutdown, then SIGKILL after 15 s) and removes the directory.
var watchdog = serverproc.Script(`pg="$1"; data="$2"; dir="$3"; shift 3
start() { "$pg" -D "$data" "$@" >>"$dir/postgres.log" 2>&1 & pid=$!; echo "$pid"; }
start "$@"
while read -r cmd; do
  case "$cmd" in
    stop) kill -INT "$pid" 2>/dev/null; wait "$pid"; pid=; echo stopped ;;
    start) start "$@" ;;
  esac
done
if [ -n "$pid" ]; then halt INT 150; fi
rm -rf "$dir"
`)

// StartCluster initialises and starts a new cluster owned by this process.
// Close stops it and removes its directory; if the process dies first, the
// watchdog does the same.
func StartCluster(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	return serverproc.Retry(ctx, func(int) (*Cluster, error) { return startOnce(ctx, bin, cred, opts) })
}

func startOnce(ctx context.Context, bin string, cred *syscall.Credential, opts Options) (*Cluster, error) {
	dir, err := serverproc.TempDir("sqlock-pg-", cred)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	port, err := serverproc.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	settings := serverSettings(dir, opts.Settings)
	settings["port"] = strconv.Itoa(port)
	return spawn(ctx, bin, data, dir, port, settings, cred)
}

// serverSettings are the settings of a server in dir: the defaults, then
// each of overrides in order.
func serverSettings(dir string, overrides ...map[string]string) map[string]string {
	settings := map[string]string{
		"fsync":                   "off",
		"full_page_writes":        "off",
		"max_connections":         "300",
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": dir,
		"log_min_messages":        "warning",
	}
	for _, o := range overrides {
		for k, v := range o {
			settings[k] = v
		}
	}
	return settings
}

// spawn starts postgres on data under a watchdog that owns dir and waits
// until it accepts connections. On error dir is gone.
func spawn(ctx context.Context, bin, data, dir string, port int, settings map[string]string,
	cred *syscall.Credential) (*Cluster, error) {
	args := []string{filepath.Join(bin, "postgres"), data, dir}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	proc, err := serverproc.Start(dir, cred, watchdog, "pgtest-watchdog", args...)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &Cluster{dir: dir, port: port, proc: proc,
		adminDSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	if err := c.waitReady(ctx); err != nil {
		proc.Close() // the watchdog removes dir
		return nil, err
	}
	return c, nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	err := serverproc.WaitReady(ctx, 60*time.Second, 25*time.Millisecond, c.proc.PID(), func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, c.adminDSN)
		if err == nil {
			conn.Close(ctx)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("pgtest: postgres %w; log: %s", err, c.logTail())
	}
	return nil
}

func (c *Cluster) logTail() string { return serverproc.LogTail(filepath.Join(c.dir, "postgres.log")) }

// Owned reports whether this process started the server (and so can stop
// and restart it).
func (c *Cluster) Owned() bool { return c.proc != nil }

// AdminDSN is a superuser connection string to the maintenance database.
func (c *Cluster) AdminDSN() string { return c.adminDSN }

// Port is the TCP port of an owned cluster (0 otherwise).
func (c *Cluster) Port() int { return c.port }

// SocketDir is the Unix-socket directory of an owned cluster ("" otherwise).
func (c *Cluster) SocketDir() string {
	if !c.Owned() {
		return ""
	}
	return c.dir
}

// Dir is the temporary directory of an owned cluster, removed on Close.
func (c *Cluster) Dir() string { return c.dir }

// PID is the postmaster's process id (0 when stopped or not owned).
func (c *Cluster) PID() int {
	if !c.Owned() {
		return 0
	}
	return c.proc.PID()
}

// Stop shuts the server down (fast mode: clients are disconnected) and waits
// until it has exited.
func (c *Cluster) Stop() error {
	if !c.Owned() {
		return ErrNotOwned
	}
	if err := c.proc.Halt("stop", "stopped"); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// Start starts a stopped server again on the same port and waits until it
// accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	if !c.Owned() {
		return ErrNotOwned
	}
	started, err := c.proc.Resume("start")
	if err != nil {
		return fmt.Errorf("pgtest: start: %w", err)
	}
	if !started {
		return nil
	}
	return c.waitReady(ctx)
}

// Kill stops the server as a crash would — SIGQUIT, PostgreSQL's
// immediate shutdown (pg_ctl stop -m immediate): every backend exits at
// once, clients' connections break, no checkpoint is written (Start
// replays the WAL) — and waits until it has exited.
func (c *Cluster) Kill() error {
	if !c.Owned() {
		return ErrNotOwned
	}
	pid := c.PID()
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("pgtest: kill: %w", err)
	}
	// Stop's SIGINT must not reach the postmaster first: it takes pending
	// signals lowest first, and SIGINT begins a fast shutdown (backends
	// told 57P01 "administrator command", a checkpoint). An immediate
	// shutdown ends at once; the bound only spares a wedged server.
	for end := time.Now().Add(30 * time.Second); serverproc.Alive(pid) && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	return c.Stop() // the watchdog reaps it
}

// Restart stops and starts the server.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.Start(ctx)
}

// Close stops an owned server and removes its directory, waiting until both
// are done. It does nothing for a DATABASE_URL cluster.
func (c *Cluster) Close() error {
	if !c.Owned() {
		return nil
	}
	return c.proc.Close()
}

// findBinDir returns the directory holding initdb and postgres.
func findBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// serverCredential picks the unprivileged user to run the server (and
// PgBouncer) as when this process is root; nil means run as ourselves.
func serverCredential() (*syscall.Credential, error) {
	cred, err := serverproc.Credential("postgres", "nobody")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	return cred, nil
}
