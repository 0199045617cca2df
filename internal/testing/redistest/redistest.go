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
// A server started with [Options.ReplicaOf] is a replica;
// [Server.DropReplicas] on its primary and [Server.Promote] fail it over
// with the writes it missed lost.
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
	"syscall"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

// ErrNoRedis is returned when no redis-server binary is found.
var ErrNoRedis = errors.New("redistest: no redis-server: run scripts/ensure-deps.sh redis-server (apt-get install -y redis-server)")

// Options tune a server started by Start.
type Options struct {
	// Persist turns on the append-only file with appendfsync always, so
	// that every acknowledged write survives Kill and Restart.
	Persist bool
	// Cluster starts the server in Redis Cluster mode as a cluster of one
	// node owning every hash slot, so that a cluster client can use it and the server refuses a command or script whose keys are
	// in different slots (CROSSSLOT), as a real cluster does.
	Cluster bool
	// ReplicaOf, a primary's host:port, starts the server as its replica
	// (--replicaof). [Server.WaitReplicas] on the primary waits until it
	// has synchronised; [Server.Promote] makes it a primary.
	ReplicaOf string
}

// Server is a redis-server owned by this process.
type Server struct {
	// Addr is the server's host:port.
	Addr string
	dir  string

	proc *serverproc.Proc // the watchdog and redis-server
}

// watchdog starts redis-server, obeys "kill"/"stop"/"start" lines on stdin,
// and on EOF (the test binary closed the pipe or died) kills the server and
// removes the directory.
var watchdog = serverproc.Script(`bin="$1"; dir="$2"; shift 2
start() { "$bin" "$@" >>"$dir/redis.log" 2>&1 & pid=$!; echo "$pid"; }
start "$@"
while read -r cmd; do
  case "$cmd" in
    kill) kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; wait "$pid"; pid=; echo done ;;
    stop) kill -CONT "$pid" 2>/dev/null; kill -TERM "$pid" 2>/dev/null; wait "$pid"; pid=; echo done ;;
    start) start "$@" ;;
  esac
done
if [ -n "$pid" ]; then halt KILL 0; fi
rm -rf "$dir"
`)

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
	return serverproc.Retry(ctx, func(int) (*Server, error) { return startOnce(ctx, bin, opts) })
}

func startOnce(ctx context.Context, bin string, opts Options) (*Server, error) {
	dir, err := serverproc.TempDir("sqlock-redis-", nil)
	if err != nil {
		return nil, err
	}
	port, err := serverproc.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{bin, dir,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--daemonize", "no", "--protected-mode", "no", "--save", "", "--loglevel", "warning",
		"--repl-diskless-sync-delay", "0"} // a replica syncs at once, not after 5 s
	if opts.Persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if opts.ReplicaOf != "" {
		host, port, err := net.SplitHostPort(opts.ReplicaOf)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: ReplicaOf: %w", err)
		}
		args = append(args, "--replicaof", host, port)
	}
	if opts.Cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"))
	}
	proc, err := serverproc.Start(dir, nil, watchdog, "redistest-watchdog", args...)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, proc: proc}
	err = s.waitReady(ctx)
	if err == nil && opts.Cluster {
		err = s.ownEverySlot(ctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// ownEverySlot makes a server in cluster mode a cluster of one node that
// owns every hash slot, and waits until it says the cluster is ok.
func (s *Server) ownEverySlot(ctx context.Context) error {
	if _, err := command(ctx, s.Addr, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE: %w", err)
	}
	return serverproc.WaitReady(ctx, 30*time.Second, 10*time.Millisecond, s.PID(), func(ctx context.Context) error {
		info, err := command(ctx, s.Addr, "CLUSTER", "INFO")
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = errors.New("cluster state not ok yet")
		}
		return err
	})
}

// waitReady waits until the server answers PING.
func (s *Server) waitReady(ctx context.Context) error {
	err := serverproc.WaitReady(ctx, 30*time.Second, 10*time.Millisecond, s.PID(), func(ctx context.Context) error {
		return ping(ctx, s.Addr)
	})
	if err != nil {
		return fmt.Errorf("redistest: redis-server %w; log: %s", err, serverproc.LogTail(filepath.Join(s.dir, "redis.log")))
	}
	return nil
}

// ping sends one PING on a connection of its own.
func ping(ctx context.Context, addr string) error {
	reply, err := command(ctx, addr, "PING")
	if err == nil && reply != "PONG" {
		err = fmt.Errorf("PING answered %q", reply)
	}
	return err
}

// command sends one command on a connection of its own and returns its
// simple-string, integer or bulk-string reply. The rig speaks the protocol itself,
// rather than through go-redis, so that the root module does not depend on
// a Redis client: only package redislock's module does.
func command(ctx context.Context, addr string, args ...string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"):
		return line[1:], nil
	case strings.HasPrefix(line, ":"):
		return line[1:], nil
	case strings.HasPrefix(line, "-"):
		return "", fmt.Errorf("%s: %s", args[0], line[1:])
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("%s: bad bulk reply %q", args[0], line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("%s: unexpected reply %q", args[0], line)
}

// WaitReplicas waits until n replicas are connected to the server, a
// primary, and each has finished its initial synchronisation (state
// online), or ctx ends.
func (s *Server) WaitReplicas(ctx context.Context, n int) error {
	err := serverproc.WaitReady(ctx, 30*time.Second, 10*time.Millisecond, s.PID(), func(ctx context.Context) error {
		info, err := command(ctx, s.Addr, "INFO", "replication")
		if err != nil {
			return err
		}
		if online := strings.Count(info, "state=online"); online < n {
			return fmt.Errorf("%d of %d replicas online", online, n)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: replicas of %s: %w", s.Addr, err)
	}
	return nil
}

// Promote makes the server, a replica, a primary (REPLICAOF NO ONE), as a
// failover does: it keeps what it has replicated, and takes writes.
func (s *Server) Promote(ctx context.Context) error {
	if _, err := command(ctx, s.Addr, "REPLICAOF", "NO", "ONE"); err != nil {
		return fmt.Errorf("redistest: promote %s: %w", s.Addr, err)
	}
	return nil
}

// DropReplicas closes the server's connections to its replicas (CLIENT
// KILL TYPE replica): what it writes next reaches a replica only when it
// reconnects — never, if the replica is paused and the server killed
// first. That is how a test loses a write in a failover on purpose.
func (s *Server) DropReplicas(ctx context.Context) error {
	if _, err := command(ctx, s.Addr, "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		return fmt.Errorf("redistest: drop the replicas of %s: %w", s.Addr, err)
	}
	return nil
}

// PID is the redis-server's process id (0 while stopped).
func (s *Server) PID() int { return s.proc.PID() }

// Dir is the server's temporary directory, removed on Close.
func (s *Server) Dir() string { return s.dir }

// Kill ends the server with SIGKILL (a crash: without Persist, its data is
// gone) and waits until it has exited.
func (s *Server) Kill() error { return s.halt("kill") }

// Stop ends the server with SIGTERM (a clean shutdown) and waits until it
// has exited.
func (s *Server) Stop() error { return s.halt("stop") }

func (s *Server) halt(cmd string) error {
	if err := s.proc.Halt(cmd, "done"); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// Start starts a halted server again on the same port and directory and
// waits until it answers.
func (s *Server) Start(ctx context.Context) error {
	started, err := s.proc.Resume("start")
	if err != nil {
		return fmt.Errorf("redistest: start: %w", err)
	}
	if !started {
		return nil
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
	if err := s.proc.Signal(sig); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// Close kills the server and removes its directory, waiting until both are
// done.
func (s *Server) Close() error { return s.proc.Close() }

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
