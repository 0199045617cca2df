// Package redistest runs throwaway redis-server processes for tests and
// benchmarks.
//
// [Start] starts a server on a free 127.0.0.1 port in a temporary directory,
// without persistence (--save "" --appendonly no) unless [Options.Persist]
// asks for an append-only file fsynced on every write. The binary is
// redis-server on PATH or /usr/bin/redis-server (Debian's package, installed
// by scripts/ensure-deps.sh redis-server); there is no silent skip.
//
// Each server is owned by a watchdog: a small shell that starts
// redis-server as its child and reads the test binary's end of a pipe. When
// the pipe closes — Close, normal exit, a panic, a go test timeout, SIGKILL —
// the watchdog kills the server and removes the directory, so no
// redis-server outlives the test binary.
//
// Fault levers: [Server.Kill] (SIGKILL), [Server.Stop] (SIGTERM, a clean
// shutdown), [Server.Start] (again, on the same port and directory),
// [Server.Restart], [Server.Pause] (SIGSTOP) and [Server.Resume] (SIGCONT).
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedis is returned when no redis-server binary is found.
var ErrNoRedis = errors.New("redistest: no redis-server: run scripts/ensure-deps.sh redis-server (apt-get install -y redis-server)")

// Options tune a server started by Start.
type Options struct {
	// Persist turns on the append-only file with appendfsync always, so
	// that every acknowledged write survives Kill and Restart.
	Persist bool
}

// Server is a redis-server owned by this process.
type Server struct {
	// Addr is the server's host:port.
	Addr string
	dir  string

	mu      sync.Mutex // serialises commands to the watchdog
	wd      *exec.Cmd
	stdin   io.WriteCloser
	replies *bufio.Scanner
	pid     int // 0 while stopped
	closed  bool
}

// watchdog starts redis-server, obeys "kill"/"stop"/"start" lines on stdin,
// and on EOF (the test binary closed the pipe or died) kills the server and
// removes the directory. It ignores INT/TERM/HUP/PIPE so that only the pipe
// decides.
const watchdog = `trap '' INT TERM PIPE HUP
bin="$1"; dir="$2"; shift 2
start() { "$bin" "$@" >>"$dir/redis.log" 2>&1 & pid=$!; echo "$pid"; }
start "$@"
while read -r cmd; do
  case "$cmd" in
    kill) kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; wait "$pid"; pid=; echo done ;;
    stop) kill -CONT "$pid" 2>/dev/null; kill -TERM "$pid" 2>/dev/null; wait "$pid"; pid=; echo done ;;
    start) start "$@" ;;
  esac
done
if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null; wait "$pid"; fi
rm -rf "$dir"
`

// New starts a server for tb, closed when the test ends.
func New(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := Start(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// NewN starts n servers for tb (for Redlock), closed when the test ends.
func NewN(tb testing.TB, n int, opts Options) []*Server {
	tb.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = New(tb, opts)
	}
	return servers
}

// Start starts a server. Close stops it and removes its directory; if the
// process dies first, the watchdog does the same — and so does the garbage
// collector if the Server becomes unreachable (its pipe is closed): keep
// it referenced while it is used.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := findBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	// A port found free can be taken before redis-server binds it: start
	// over a few times.
	for range 3 {
		var s *Server
		if s, lastErr = startOnce(ctx, bin, opts); lastErr == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startOnce(ctx context.Context, bin string, opts Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "sqlock-redis-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"-c", watchdog, "redistest-watchdog", bin, dir,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--daemonize", "no", "--protected-mode", "no", "--save", "", "--loglevel", "warning"}
	if opts.Persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = dir
	// A process group of its own: a Ctrl-C aimed at go test must not kill
	// the watchdog before it has cleaned up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redistest: start watchdog: %w", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, wd: cmd, stdin: in,
		replies: bufio.NewScanner(out)}
	if s.pid, err = s.readPID(); err == nil {
		err = s.waitReady(ctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) readPID() (int, error) {
	if !s.replies.Scan() {
		return 0, fmt.Errorf("redistest: watchdog exited: %v", s.replies.Err())
	}
	return strconv.Atoi(strings.TrimSpace(s.replies.Text()))
}

// waitReady waits until the server answers PING.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := ping(ctx, s.Addr)
		if err == nil {
			return nil
		}
		if pid := s.PID(); pid == 0 || syscall.Kill(pid, 0) != nil || exited(pid) {
			return fmt.Errorf("redistest: redis-server exited during start-up: %s", s.logTail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: server did not answer: %w; log: %s", err, s.logTail())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// exited reports whether pid is a zombie (it exited; the watchdog has not
// reaped it yet).
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && strings.Contains(string(b), ") Z ")
}

// ping sends one PING on a connection of its own.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// PID is the redis-server's process id (0 while stopped).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Dir is the server's temporary directory, removed on Close.
func (s *Server) Dir() string { return s.dir }

// Client returns a go-redis client for the server, closed when the test
// ends. configure, when not nil, may change the options first.
func (s *Server) Client(tb testing.TB, configure func(*redis.Options)) *redis.Client {
	tb.Helper()
	o := &redis.Options{Addr: s.Addr}
	if configure != nil {
		configure(o)
	}
	c := redis.NewClient(o)
	tb.Cleanup(func() { c.Close() })
	return c
}

// Kill ends the server with SIGKILL (a crash: without Persist, its data is
// gone) and waits until it has exited.
func (s *Server) Kill() error { return s.halt("kill") }

// Stop ends the server with SIGTERM (a clean shutdown) and waits until it
// has exited.
func (s *Server) Stop() error { return s.halt("stop") }

func (s *Server) halt(cmd string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid == 0 || s.closed {
		return nil
	}
	if _, err := io.WriteString(s.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("redistest: %s: %w", cmd, err)
	}
	if !s.replies.Scan() || s.replies.Text() != "done" {
		return fmt.Errorf("redistest: %s: watchdog did not confirm: %v", cmd, s.replies.Err())
	}
	s.pid = 0
	return nil
}

// Start starts a halted server again on the same port and directory and
// waits until it answers.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.pid != 0 || s.closed {
		s.mu.Unlock()
		return nil
	}
	if _, err := io.WriteString(s.stdin, "start\n"); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("redistest: start: %w", err)
	}
	pid, err := s.readPID()
	if err == nil {
		s.pid = pid
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.waitReady(ctx)
}

// Restart kills the server (SIGKILL) and starts it again.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Pause stops the server with SIGSTOP: connections stay open, nothing is
// answered, no key expires until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid == 0 {
		return errors.New("redistest: server is not running")
	}
	if err := syscall.Kill(s.pid, sig); err != nil {
		return fmt.Errorf("redistest: %v: %w", sig, err)
	}
	return nil
}

// Close kills the server and removes its directory, waiting until both are
// done.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.stdin.Close()
	err := s.wd.Wait()
	s.pid = 0
	return err
}

// Latency measures, now, how long this machine takes for one round trip
// to the server, scheduling included: the slowest of a few PINGs and of a
// few 1 ms timer sleeps' overshoot. Tests scale their timing windows by it.
// It is at least 100 µs.
func (s *Server) Latency(tb testing.TB) time.Duration {
	tb.Helper()
	worst := 100 * time.Microsecond
	for range 5 {
		start := time.Now()
		if err := ping(context.Background(), s.Addr); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		worst = max(worst, time.Since(start))
		start = time.Now()
		time.Sleep(time.Millisecond)
		worst = max(worst, time.Since(start)-time.Millisecond)
	}
	return worst
}

func findBinary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server", nil
	}
	return "", ErrNoRedis
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
