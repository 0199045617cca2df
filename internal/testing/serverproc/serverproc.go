// Package serverproc is the process code the throwaway-server harnesses
// (internal/testing/pgtest, internal/testing/mariatest, internal/testing/redistest) share: the
// unprivileged user a server runs as when the tests run as root, a free
// port, a temporary directory, and the watchdog that owns the server.
//
// A watchdog is a small /bin/sh script, started in a process group of its
// own (a Ctrl-C aimed at go test must not kill it before it has cleaned
// up), that starts the server as its child, reports its pid on stdout, obeys
// command lines on stdin, and when stdin reaches EOF — [Proc.Close], normal
// exit, a panic, a go test timeout, SIGKILL of the test binary — stops the
// server and removes the directory. So no server process or temporary
// directory outlives the test binary.
//
// [Server] is such a server with the fault levers every harness offers
// (Kill, Start again, Restart, Pause, Resume); a harness embeds it.
package serverproc

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Credential returns the credential of the first of users that exists, to
// run a server that refuses root (initdb, mariadbd, pgbouncer) as, when this
// process is root; nil, run as ourselves, otherwise.
func Credential(users ...string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range users {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root and found no unprivileged user (%s) to run the server as",
		strings.Join(users, ", "))
}

// Own gives paths to cred's user; it does nothing when cred is nil.
func Own(cred *syscall.Credential, paths ...string) error {
	if cred == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	return nil
}

// TempDir makes a new temporary directory (os.MkdirTemp's pattern) owned by
// cred's user.
func TempDir(pattern string, cred *syscall.Credential) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	if err := Own(cred, dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// FreePort returns a 127.0.0.1 TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Retry calls start (attempt 0, 1, 2) until it succeeds, three times at
// most, or until ctx is done: a port found free by [FreePort] can be taken
// before the server binds it, and a failed attempt has removed what it made.
func Retry[T any](ctx context.Context, start func(attempt int) (T, error)) (T, error) {
	var v T
	var err error
	for attempt := range 3 {
		if v, err = start(attempt); err == nil || ctx.Err() != nil {
			break
		}
	}
	return v, err
}

// Script is body after the preamble every watchdog script shares: it
// ignores SIGINT, SIGTERM, SIGPIPE and SIGHUP, so that only its stdin
// decides, and defines
//
//	halt SIGNAL TENTHS
//
// which sends SIGNAL to the process $pid, waits up to TENTHS tenths of a
// second for it to exit (a zombie has exited), then SIGKILLs and reaps it.
func Script(body string) string {
	return `trap '' INT TERM PIPE HUP
halt() {
  kill -"$1" "$pid" 2>/dev/null
  i=0
  while [ $i -lt "$2" ] && [ -e "/proc/$pid" ] && ! grep -q ') Z ' "/proc/$pid/stat" 2>/dev/null; do
    sleep 0.1; i=$((i+1))
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
}
` + body
}

// ErrClosed is returned by the levers of a [Proc] after Close.
var ErrClosed = errors.New("the server was closed")

// Proc is a server owned by a watchdog script. Its methods are safe for
// concurrent use; commands to the watchdog are serialised.
type Proc struct {
	cmd *exec.Cmd

	mu      sync.Mutex
	stdin   io.WriteCloser
	replies *bufio.Scanner
	pid     int // the server's, 0 while stopped
	closed  bool
}

// Start runs the watchdog script (see [Script]) as cred's user in dir, in a
// process group of its own, with name as its $0 and args as its
// parameters, and reads the server's pid, the script's first line. On
// error the watchdog has ended and dir is removed.
func Start(dir string, cred *syscall.Credential, script, name string, args ...string) (*Proc, error) {
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, name}, args...)...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	in, err := cmd.StdinPipe()
	if err == nil {
		var out io.ReadCloser
		if out, err = cmd.StdoutPipe(); err == nil {
			if err = cmd.Start(); err == nil {
				p := &Proc{cmd: cmd, stdin: in, replies: bufio.NewScanner(out)}
				if p.pid, err = p.readPID(); err == nil {
					return p, nil
				}
				p.Close()
			} else {
				err = fmt.Errorf("start watchdog: %w", err)
			}
		}
	}
	os.RemoveAll(dir)
	return nil, err
}

func (p *Proc) readPID() (int, error) {
	if !p.replies.Scan() {
		return 0, fmt.Errorf("watchdog exited: %v", p.replies.Err())
	}
	return strconv.Atoi(strings.TrimSpace(p.replies.Text()))
}

// PID is the server's process id, 0 while it is stopped.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// WatchdogPID is the watchdog's process id, which is also its process
// group's.
func (p *Proc) WatchdogPID() int { return p.cmd.Process.Pid }

// Halt sends the watchdog the line cmd, which stops the server, and waits
// for the reply line confirm. It does nothing while the server is stopped.
func (p *Proc) Halt(cmd, confirm string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 || p.closed {
		return nil
	}
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	if !p.replies.Scan() || p.replies.Text() != confirm {
		return fmt.Errorf("%s: watchdog did not confirm: %v", cmd, p.replies.Err())
	}
	p.pid = 0
	return nil
}

// Resume sends the watchdog the line cmd, which starts a stopped server
// again, and reads its new pid. It reports false when the server was
// running already.
func (p *Proc) Resume(cmd string) (started bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false, ErrClosed
	}
	if p.pid != 0 {
		return false, nil
	}
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		return false, fmt.Errorf("%s: %w", cmd, err)
	}
	pid, err := p.readPID()
	if err != nil {
		return false, err
	}
	p.pid = pid
	return true, nil
}

// Signal sends sig to the running server.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 {
		return errors.New("server is not running")
	}
	if err := syscall.Kill(p.pid, sig); err != nil {
		return fmt.Errorf("%v: %w", sig, err)
	}
	return nil
}

// Close ends the watchdog's stdin, which makes it stop the server and
// remove the directory, and waits until it has. Later calls do nothing.
func (p *Proc) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.stdin.Close()
	err := p.cmd.Wait()
	p.pid = 0
	return err
}

// ErrExited is returned by [WaitReady] when the server exited.
var ErrExited = errors.New("exited during start-up")

// WaitReady calls ready every poll until it returns nil. It gives up with
// [ErrExited] once the process pid runs no more, and with ready's last
// error once timeout has passed.
func WaitReady(ctx context.Context, timeout, poll time.Duration, pid int, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		if !Alive(pid) {
			return ErrExited
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("did not accept connections: %w", err)
		case <-time.After(poll):
		}
	}
}

// Alive reports whether the process pid runs and is not a zombie (one that
// has exited and waits for its parent).
func Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	return err == nil && !strings.Contains(string(st), ") Z ")
}

// LogTail is the last 2,000 bytes of the log file at path, for an error
// message.
func LogTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
