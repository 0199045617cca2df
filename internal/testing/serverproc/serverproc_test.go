package serverproc_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

// sleeper is a watchdog of a "server" that sleeps: it obeys "stop"
// (SIGKILL), and on EOF halts it and removes the directory. sleep inherits
// the watchdog's ignored SIGTERM, so halt has to escalate to SIGKILL after
// its 0.5 s.
var sleeper = serverproc.Script(`dir="$1"
sleep 600 & pid=$!
echo "$pid"
while read -r cmd; do
  case "$cmd" in stop) kill -KILL "$pid"; wait "$pid"; pid=; echo stopped ;; esac
done
if [ -n "$pid" ]; then halt TERM 5; fi
rm -rf "$dir"
`)

// startSleeper starts the sleeper in a temporary directory.
func startSleeper(t *testing.T) (dir string, p *serverproc.Proc) {
	t.Helper()
	dir, err := serverproc.TempDir("serverproc-test-", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err = serverproc.Start(dir, nil, sleeper, "serverproc-test", dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, p
}

// TestCloseStopsTheServerAndRemovesTheDirectory: Close ends the
// watchdog's stdin; the server is gone and the directory removed before
// Close returns.
func TestCloseStopsTheServerAndRemovesTheDirectory(t *testing.T) {
	dir, p := startSleeper(t)
	pid := p.PID()
	if !serverproc.Alive(pid) || pid == p.WatchdogPID() {
		t.Fatalf("server %d not running under watchdog %d", pid, p.WatchdogPID())
	}
	if pgid, _ := syscall.Getpgid(p.WatchdogPID()); pgid != p.WatchdogPID() {
		t.Fatalf("watchdog %d in process group %d, not its own", p.WatchdogPID(), pgid)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if serverproc.Alive(pid) {
		t.Fatalf("server %d alive after Close", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there after Close: %v", dir, err)
	}
	if p.PID() != 0 || p.Close() != nil {
		t.Fatal("a closed Proc reports a pid or fails a second Close")
	}
	if _, err := p.Resume("start"); !errors.Is(err, serverproc.ErrClosed) {
		t.Fatalf("Resume after Close: %v, want ErrClosed", err)
	}
}

// TestHaltWaitsForTheConfirmation: Halt returns once the watchdog
// confirms; the server has exited, and a second Halt does nothing.
func TestHaltWaitsForTheConfirmation(t *testing.T) {
	_, p := startSleeper(t)
	defer p.Close()
	pid := p.PID()
	if err := p.Halt("stop", "stopped"); err != nil {
		t.Fatal(err)
	}
	if serverproc.Alive(pid) || p.PID() != 0 {
		t.Fatalf("server %d alive (PID %d) after Halt", pid, p.PID())
	}
	if err := p.Halt("stop", "stopped"); err != nil {
		t.Fatalf("second Halt: %v", err)
	}
	if err := p.Signal(syscall.SIGCONT); err == nil {
		t.Fatal("Signal to a stopped server succeeded")
	}
}

// TestRetryStopsAtTheFirstSuccess: Retry makes at most three attempts and
// returns the first success, or the last error.
func TestRetryStopsAtTheFirstSuccess(t *testing.T) {
	ctx := context.Background()
	var calls []int
	v, err := serverproc.Retry(ctx, func(attempt int) (int, error) {
		calls = append(calls, attempt)
		if attempt < 1 {
			return 0, errors.New("port taken")
		}
		return 42, nil
	})
	if v != 42 || err != nil || len(calls) != 2 {
		t.Fatalf("Retry = %d, %v after attempts %v", v, err, calls)
	}
	calls = nil
	_, err = serverproc.Retry(ctx, func(attempt int) (int, error) {
		calls = append(calls, attempt)
		return 0, errors.New("port taken")
	})
	if err == nil || len(calls) != 3 {
		t.Fatalf("Retry = %v after attempts %v", err, calls)
	}
}
