package serverproc_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

// levers is a watchdog of a sleeping "server" that obeys the lines a
// Server sends: "kill" (reply "done") and "start" (reply the new pid).
var levers = serverproc.Script(`dir="$1"
start() { sleep 600 & pid=$!; echo "$pid"; }
start
while read -r cmd; do
  case "$cmd" in
    kill) kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid"; wait "$pid"; pid=; echo done ;;
    start) start ;;
  esac
done
if [ -n "$pid" ]; then halt KILL 0; fi
rm -rf "$dir"
`)

// state is the process state letter of pid (R, S, T …) from /proc.
func state(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return after[:1]
}

// TestServerLevers: Kill ends the server (PID 0, a second Kill does
// nothing); Start runs a new one and waits on ready, whose error it
// returns; Restart is both; Pause and Resume stop and continue it; Close
// ends it and removes the directory; every lever's error names the
// harness.
func TestServerLevers(t *testing.T) {
	dir, err := serverproc.TempDir("serverproc-test-", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := serverproc.Start(dir, nil, levers, "serverproc-test", dir)
	if err != nil {
		t.Fatal(err)
	}
	readies := 0
	var notReady error
	s := serverproc.NewServer("leverstest", p, dir, func(context.Context) error { readies++; return notReady })
	defer s.Close()
	ctx := context.Background()

	first := s.PID()
	if !serverproc.Alive(first) || s.Dir() != dir || s.Proc() != p {
		t.Fatalf("server %d not running in %s", first, dir)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	waitState(t, first, "T")
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	waitState(t, first, "S")
	if err := s.Start(ctx); err != nil || readies != 0 {
		t.Fatalf("Start of a running server: %v after %d ready checks; want nil, none", err, readies)
	}
	if err := s.Pause(); err != nil { // a paused server is continued, then killed
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if serverproc.Alive(first) || s.PID() != 0 || s.Kill() != nil {
		t.Fatalf("server %d alive (PID %d) after Kill, or a second Kill failed", first, s.PID())
	}
	if err := s.Pause(); err == nil || !strings.HasPrefix(err.Error(), "leverstest: ") {
		t.Fatalf("Pause of a killed server: %v; want an error naming the harness", err)
	}
	if err := s.Start(ctx); err != nil || readies != 1 || !serverproc.Alive(s.PID()) || s.PID() == first {
		t.Fatalf("Start: %v after %d ready checks, PID %d", err, readies, s.PID())
	}
	second := s.PID()
	notReady = errors.New("not answering")
	if err := s.Restart(ctx); !errors.Is(err, notReady) || readies != 2 || serverproc.Alive(second) {
		t.Fatalf("Restart of a server that never answers: %v after %d ready checks (old %d alive: %v)",
			err, readies, second, serverproc.Alive(second))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there after Close: %v", dir, err)
	}
	if err := s.Start(ctx); !errors.Is(err, serverproc.ErrClosed) {
		t.Fatalf("Start after Close: %v, want ErrClosed", err)
	}
}

// waitState waits until pid is in state (SIGSTOP and SIGCONT are
// delivered asynchronously), failing at the test's deadline.
func waitState(t *testing.T, pid int, want string) {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		defer cancel()
	}
	for state(t, pid) != want {
		select {
		case <-ctx.Done():
			t.Fatalf("process %d never reached state %s (is %s)", pid, want, state(t, pid))
		case <-time.After(time.Millisecond):
		}
	}
}
