package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
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
	dir    string // temporary directory: data/, the socket, postgres.log
	port   int
	mu     sync.Mutex // serialises commands to the watchdog
	wd     *watchdogProc
	pid    int // postmaster pid, 0 while stopped
	closed bool
}

// Options tune a cluster started by StartCluster.
type Options struct {
	// Settings are passed to postgres as -c name=value and override the
	// defaults (fsync=off, full_page_writes=off, max_connections=300).
	Settings map[string]string
}

// watchdog starts postgres, obeys "stop"/"start" lines on stdin, and on EOF
// (the test binary closed the pipe or died) stops the server and removes the
// directory. It ignores SIGINT/SIGTERM/SIGPIPE so that only the pipe decides.
const watchdog = `trap '' INT TERM PIPE HUP
pg="$1"; data="$2"; dir="$3"; shift 3
start() { "$pg" -D "$data" "$@" >>"$dir/postgres.log" 2>&1 & pid=$!; echo "$pid"; }
start "$@"
while read -r cmd; do
  case "$cmd" in
    stop) kill -INT "$pid" 2>/dev/null; wait "$pid"; pid=; echo stopped ;;
    start) start "$@" ;;
  esac
done
if [ -n "$pid" ]; then
  kill -INT "$pid" 2>/dev/null
  i=0  # fast shutdown, then SIGKILL after 15 s; a zombie has exited
  while [ $i -lt 150 ] && [ -e "/proc/$pid" ] && ! grep -q ') Z ' "/proc/$pid/stat" 2>/dev/null; do
    sleep 0.1; i=$((i+1))
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
fi
rm -rf "$dir"
`

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
	var lastErr error
	// A port found free can be taken before postgres binds it; start over
	// (the failed attempt's directory is already gone) a few times.
	for attempt := 0; attempt < 3; attempt++ {
		var c *Cluster
		if c, lastErr = startOnce(ctx, bin, cred, opts); lastErr == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startOnce(ctx context.Context, bin string, cred *syscall.Credential, opts Options) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "sqlock-pg-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
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
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	settings := map[string]string{
		"fsync":                   "off",
		"full_page_writes":        "off",
		"max_connections":         "300",
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": dir,
		"log_min_messages":        "warning",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	settings["port"] = strconv.Itoa(port)
	c := &Cluster{dir: dir, port: port,
		adminDSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	if err := c.spawn(bin, data, settings, cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.waitReady(ctx); err != nil {
		c.stop() // the watchdog removes dir
		return nil, err
	}
	return c, nil
}

func (c *Cluster) spawn(bin, data string, settings map[string]string, cred *syscall.Credential) error {
	args := []string{"-c", watchdog, "pgtest-watchdog", filepath.Join(bin, "postgres"), data, c.dir}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	wd, err := startWatchdog(c.dir, cred, args)
	if err != nil {
		return err
	}
	c.wd = wd
	pid, err := c.readPID()
	if err != nil {
		c.stop()
		return err
	}
	c.pid = pid
	return nil
}

func (c *Cluster) readPID() (int, error) { return readPID(c.wd.replies) }

// watchdogProc is a running watchdog shell: the test binary holds the write
// end of its stdin, and the shell's stdout carries its replies.
type watchdogProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies *bufio.Scanner
}

// startWatchdog runs /bin/sh with args (["-c", script, name, ...]) in dir
// as cred, in a process group of its own (a Ctrl-C aimed at go test must
// not kill the watchdog before it has cleaned up). The script is expected to
// end its children and clean up when its stdin reaches EOF, which happens
// when the test binary closes the pipe or dies in any way.
func startWatchdog(dir string, cred *syscall.Credential, args []string) (*watchdogProc, error) {
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtest: start watchdog: %w", err)
	}
	return &watchdogProc{cmd: cmd, stdin: in, replies: bufio.NewScanner(out)}, nil
}

// close ends the watchdog's stdin, which makes it stop what it started and
// clean up, and waits for it to exit.
func (w *watchdogProc) close() error {
	w.stdin.Close()
	return w.cmd.Wait()
}

// readPID reads the next reply line of a watchdog as a process id.
func readPID(replies *bufio.Scanner) (int, error) {
	if !replies.Scan() {
		return 0, fmt.Errorf("pgtest: watchdog exited: %v", replies.Err())
	}
	return strconv.Atoi(strings.TrimSpace(replies.Text()))
}

func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.adminDSN)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		if c.pid != 0 && syscall.Kill(c.pid, 0) != nil {
			return fmt.Errorf("pgtest: postgres exited during start-up: %s", c.logTail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: server did not accept connections: %w; log: %s", err, c.logTail())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Owned reports whether this process started the server (and so can stop
// and restart it).
func (c *Cluster) Owned() bool { return c.wd != nil }

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
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid
}

// Stop shuts the server down (fast mode: clients are disconnected) and waits
// until it has exited.
func (c *Cluster) Stop() error {
	if !c.Owned() {
		return ErrNotOwned
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pid == 0 {
		return nil
	}
	if _, err := io.WriteString(c.wd.stdin, "stop\n"); err != nil {
		return fmt.Errorf("pgtest: stop: %w", err)
	}
	if !c.wd.replies.Scan() || c.wd.replies.Text() != "stopped" {
		return fmt.Errorf("pgtest: stop: watchdog did not confirm: %v", c.wd.replies.Err())
	}
	c.pid = 0
	return nil
}

// Start starts a stopped server again on the same port and waits until it
// accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	if !c.Owned() {
		return ErrNotOwned
	}
	c.mu.Lock()
	if c.pid != 0 {
		c.mu.Unlock()
		return nil
	}
	if _, err := io.WriteString(c.wd.stdin, "start\n"); err != nil {
		c.mu.Unlock()
		return fmt.Errorf("pgtest: start: %w", err)
	}
	pid, err := c.readPID()
	if err == nil {
		c.pid = pid
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.waitReady(ctx)
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.stop()
}

func (c *Cluster) stop() error {
	err := c.wd.close()
	c.pid = 0
	return err
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

// serverCredential picks the unprivileged user to run the server as when
// this process is root; nil means run as ourselves.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgtest: running as root and found no unprivileged user (postgres, nobody) to run the server as")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
