package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/internal/testing/redistest"
	"github.com/sqlock/sqlock/internal/testing/serverproc"
	"github.com/sqlock/sqlock/redislock"
)

// The sqlock binary the run tests drive, built once (with -race when the
// tests are) and removed by TestMain.
var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func sqlockBinary(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() {
		binary.dir, binary.err = os.MkdirTemp("", "sqlock-run-test-")
		if binary.err != nil {
			return
		}
		binary.path = filepath.Join(binary.dir, "sqlock")
		args := []string{"build", "-o", binary.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

func removeSqlockBinary() {
	if binary.dir != "" {
		os.RemoveAll(binary.dir)
	}
}

// testCtx bounds every wait of a run test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// target is where a backend's locks live: the flags that reach it.
type target struct {
	backend string
	flags   []string
	db      *pgtest.DB    // lease, advisory
	redis   *redis.Client // redis
	srv     *redistest.Server
}

func newTarget(t *testing.T, backend string) target {
	t.Helper()
	tg := target{backend: backend, flags: []string{"--backend", backend}}
	if backend == "redis" {
		tg.srv = redistest.New(t, redistest.Options{})
		tg.flags = append(tg.flags, "--redis", tg.srv.Addr)
		tg.redis = redis.NewClient(&redis.Options{Addr: tg.srv.Addr})
		t.Cleanup(func() { tg.redis.Close() })
		return tg
	}
	tg.db = pgtest.New(t)
	tg.flags = append(tg.flags, "--dsn", tg.db.DSN)
	return tg
}

var backends = []string{"lease", "advisory", "redis"}

// proc is one sqlock run process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	code           int
}

// start starts `sqlock run args...` in dir.
func start(ctx context.Context, t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	return startEnv(ctx, t, dir, nil, args...)
}

// startEnv is start with variables added to the environment.
func startEnv(ctx context.Context, t *testing.T, dir string, env []string, args ...string) *proc {
	t.Helper()
	return startVia(ctx, t, dir, env, append([]string{sqlockBinary(t), "run"}, args...)...)
}

// startVia starts argv, which runs sqlock run (itself, or through a
// shell that prepares its start).
func startVia(ctx context.Context, t *testing.T, dir string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Dir = dir
	// A -race binary sleeps a second at exit unless told not to.
	p.cmd.Env = append(append(os.Environ(), "DATABASE_URL=", "REDIS_URL=", "GORACE=atexit_sleep_ms=0"), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second // a command still holding the output pipes is not waited for
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	return p
}

// wait returns the exit code, failing the test if the process outlives ctx.
func (p *proc) wait(ctx context.Context, t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-ctx.Done():
		<-p.done // killed by CommandContext; its output is then complete
		t.Fatalf("%v never exited: %v\nstderr: %s", p.cmd.Args[1:], ctx.Err(), p.stderr.String())
	}
	t.Logf("%s → exit %d\n%s%s", strings.Join(p.cmd.Args[1:], " "), p.code, p.stdout.String(), p.stderr.String())
	return p.code
}

// sqlockRun runs `sqlock run args...` in dir to its end.
func sqlockRun(ctx context.Context, t *testing.T, dir string, args ...string) (int, *proc) {
	t.Helper()
	p := start(ctx, t, dir, args...)
	return p.wait(ctx, t), p
}

// waitFile waits until path exists.
func waitFile(ctx context.Context, t *testing.T, path, what string) {
	t.Helper()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never happened (%s never appeared)", what, path)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// holdScript holds the lock until the file stop appears, after saying ready.
// It and the other commands that wait end by themselves when their parent,
// sqlock run, is gone: a failed test leaves no command running.
const holdScript = `echo "$SQLOCK_TOKEN" > ready; while [ ! -e stop ] && kill -0 $PPID 2>/dev/null; do sleep 0.02; done`

// TestRunNeverOverlapsOnOneName: on each backend, 3 "hosts" each run
// `sqlock run` twice, at once, on one name; every command appends a start
// and an end line (with its pid and token) to one file. Exclusion means the
// lines pair up, start then end of the same command, never interleaved;
// and the tokens of lease and redis increase from one holder to the next.
func TestRunNeverOverlapsOnOneName(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			tg := newTarget(t, backend)
			dir := t.TempDir()
			const hosts, runs = 3, 2
			script := `echo "start $$ $SQLOCK_TOKEN" >> log; sleep 0.03; echo "end $$ $SQLOCK_TOKEN" >> log`
			var wg sync.WaitGroup
			codes := make(chan string, hosts*runs)
			for range hosts {
				wg.Go(func() {
					for range runs {
						args := append(append([]string{"--name", "job", "--wait", "1m"}, tg.flags...), "--", "sh", "-c", script)
						p := start(ctx, t, dir, args...)
						<-p.done
						if p.code != 0 {
							codes <- fmt.Sprintf("exit %d: %s", p.code, p.stderr.String())
						}
					}
				})
			}
			wg.Wait()
			close(codes)
			for c := range codes {
				t.Error(c)
			}
			lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "log"))), "\n")
			if len(lines) != 2*hosts*runs {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), 2*hosts*runs, strings.Join(lines, "\n"))
			}
			last := int64(0)
			for i := 0; i < len(lines); i += 2 {
				s, e := strings.Fields(lines[i]), strings.Fields(lines[i+1])
				if s[0] != "start" || e[0] != "end" || s[1] != e[1] {
					t.Fatalf("commands overlapped at lines %d-%d:\n%s", i+1, i+2, strings.Join(lines, "\n"))
				}
				if backend == "advisory" {
					if len(s) != 2 {
						t.Errorf("advisory command saw a token: %q", lines[i])
					}
					continue
				}
				tok, err := strconv.ParseInt(s[2], 10, 64)
				if err != nil || tok <= last {
					t.Fatalf("token %q after %d: not increasing\n%s", s[2], last, strings.Join(lines, "\n"))
				}
				last = tok
			}
		})
	}
}

// TestRunNotAcquiredExits121: while one sqlock run holds the name, another
// with --wait 0 (and one whose wait runs out) exits 121 without running its
// command; once the holder's command exits, the lock is free again.
func TestRunNotAcquiredExits121(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			tg := newTarget(t, backend)
			dir := t.TempDir()
			flags := append([]string{"--name", "nightly"}, tg.flags...)
			holder := start(ctx, t, dir, append(flags, "--", "sh", "-c", holdScript)...)
			waitFile(ctx, t, filepath.Join(dir, "ready"), "the holder's command")
			if label := holderLabel(ctx, t, tg, "nightly"); backend != "advisory" &&
				!strings.Contains(label, fmt.Sprintf(" pid %d: sh -c ", holder.cmd.Process.Pid)) {
				t.Errorf("holder label %q: not the host, pid and command of the holder", label)
			}
			for _, wait := range []string{"0", "100ms"} {
				code, p := sqlockRun(ctx, t, dir, append(flags, "--wait", wait, "--", "touch", "ran")...)
				if code != exitRunNotAcquired {
					t.Errorf("--wait %s while held: exit %d, want %d", wait, code, exitRunNotAcquired)
				}
				if !strings.Contains(p.stderr.String(), "not acquired") {
					t.Errorf("--wait %s: stderr does not say not acquired: %q", wait, p.stderr.String())
				}
				if exists(filepath.Join(dir, "ran")) {
					t.Fatalf("--wait %s: the command ran while the lock was held", wait)
				}
			}
			os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
			if code := holder.wait(ctx, t); code != 0 {
				t.Fatalf("holder: exit %d", code)
			}
			if code, _ := sqlockRun(ctx, t, dir, append(flags, "--wait", "0", "--", "touch", "ran")...); code != 0 || !exists(filepath.Join(dir, "ran")) {
				t.Fatalf("after the holder released: exit %d, ran %t", code, exists(filepath.Join(dir, "ran")))
			}
		})
	}
}

// TestRunPassesTheCommandsExitCodeAndEnvironment: the command's own exit
// code comes back (128+N for a death by signal N; 126 and 127 as the shell
// gives them); the command sees SQLOCK_NAME, SQLOCK_BACKEND and the lease's
// SQLOCK_TOKEN, not one inherited from the caller.
func TestRunPassesTheCommandsExitCodeAndEnvironment(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tg := newTarget(t, "lease")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "noexec"), []byte("#!/bin/sh\n"), 0o644)
	flags := append([]string{"--name", "codes", "--wait", "0"}, tg.flags...)
	for _, c := range []struct {
		cmd  []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 42"}, 42},
		{[]string{"sh", "-c", "exit 1"}, 1},
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{[]string{"./noexec"}, exitRunNoExec},
		{[]string{"no-such-command-sqlock"}, exitRunNotFound},
	} {
		if code, _ := sqlockRun(ctx, t, dir, append(flags, c.cmd...)...); code != c.want {
			t.Errorf("%v: exit %d, want %d", c.cmd, code, c.want)
		}
	}
	// Each run above released its lock: --wait 0 took it every time, and
	// the environment is this run's own.
	p := startEnv(ctx, t, dir, []string{"SQLOCK_TOKEN=999999", "SQLOCK_NAME=outer"},
		append(flags, "--", "sh", "-c", `env | grep '^SQLOCK_' | sort > env`)...)
	if code := p.wait(ctx, t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	got := readFile(t, filepath.Join(dir, "env"))
	var tok int64
	if _, err := fmt.Sscanf(got, "SQLOCK_BACKEND=lease\nSQLOCK_NAME=codes\nSQLOCK_TOKEN=%d\n", &tok); err != nil || tok <= 0 || tok == 999999 {
		t.Fatalf("environment %q (%v)", got, err)
	}
}

// TestRunLostLockStopsTheCommand: each backend's own fault takes the lock
// away while the command runs — the lease's row deleted, the advisory
// lock's connection terminated, the Redis key deleted — and sqlock run
// sends the command SIGTERM (its trap writes "term") and exits 122. A
// command that ignores SIGTERM is killed after --grace.
func TestRunLostLockStopsTheCommand(t *testing.T) {
	const trapped = `trap 'echo term >> out; exit 0' TERM; echo ready > ready; while kill -0 $PPID 2>/dev/null; do sleep 0.02; done`
	const deaf = `trap '' TERM; echo ready > ready; while kill -0 $PPID 2>/dev/null; do sleep 0.02; done`
	for _, c := range []struct{ backend, script string }{
		{"lease", trapped}, {"advisory", trapped}, {"redis", trapped}, {"lease", deaf},
	} {
		name := c.backend
		if c.script == deaf {
			name += "/ignoring-SIGTERM"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			tg := newTarget(t, c.backend)
			dir := t.TempDir()
			flags := append([]string{"--name", "lost", "--grace", "200ms"}, tg.flags...)
			if c.backend != "advisory" {
				// Renewed every second: short enough for a cheap test, long
				// enough that no load spike loses it before the command starts.
				flags = append(flags, "--ttl", "3s")
			}
			p := start(ctx, t, dir, append(flags, "--", "sh", "-c", c.script)...)
			waitFile(ctx, t, filepath.Join(dir, "ready"), "the command's start")
			lose(ctx, t, tg, "lost")
			if code := p.wait(ctx, t); code != exitRunLost {
				t.Fatalf("exit %d, want %d", code, exitRunLost)
			}
			if !strings.Contains(p.stderr.String(), "lost") {
				t.Errorf("stderr does not say the lock was lost: %q", p.stderr.String())
			}
			if c.script == trapped && readFile(t, filepath.Join(dir, "out")) != "term\n" {
				t.Errorf("the command did not get SIGTERM once: %q", readFile(t, filepath.Join(dir, "out")))
			}
		})
	}
}

// TestRunLockGoneAtReleaseExits122: a lock taken away while the command
// runs, between renewals (a 30 s TTL renews after 10 s), is found gone
// by the release when the command ends: exit 122, not the command's 0,
// since someone else may have held it meanwhile.
func TestRunLockGoneAtReleaseExits122(t *testing.T) {
	for _, backend := range []string{"lease", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			tg := newTarget(t, backend)
			dir := t.TempDir()
			p := start(ctx, t, dir, append(append([]string{"--name", "gone", "--ttl", "30s"}, tg.flags...), "--", "sh", "-c", holdScript)...)
			waitFile(ctx, t, filepath.Join(dir, "ready"), "the command's start")
			lose(ctx, t, tg, "gone")
			os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
			if code := p.wait(ctx, t); code != exitRunLost {
				t.Fatalf("exit %d, want %d", code, exitRunLost)
			}
			if !strings.Contains(p.stderr.String(), "no longer held at release") {
				t.Errorf("stderr does not say the lock was gone: %q", p.stderr.String())
			}
		})
	}
}

// holderLabel is the label stored with the lock called name ("" for
// advisory, which stores none).
func holderLabel(ctx context.Context, t *testing.T, tg target, name string) string {
	t.Helper()
	switch tg.backend {
	case "lease":
		var label string
		if err := tg.db.SQL().QueryRowContext(ctx, "SELECT holder FROM sqlock_leases WHERE name = $1", name).Scan(&label); err != nil {
			t.Fatal(err)
		}
		return label
	case "redis":
		h, held, err := redislock.New(tg.redis).Holder(ctx, name)
		if err != nil || !held {
			t.Fatalf("Holder(%q): %+v, held %t, %v", name, h, held, err)
		}
		return h.Label
	}
	return ""
}

// TestRunHolderLabel: --holder labels the lease or Redis lock for
// operators (sqlock leases shows it); a label the backend refuses is a
// usage failure, 125, and advisory, which stores none, refuses the flag.
func TestRunHolderLabel(t *testing.T) {
	for _, backend := range []string{"lease", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			tg := newTarget(t, backend)
			dir := t.TempDir()
			flags := append([]string{"--name", "labelled"}, tg.flags...)
			p := start(ctx, t, dir, append(flags, "--holder", "deploy job 42", "--", "sh", "-c", holdScript)...)
			waitFile(ctx, t, filepath.Join(dir, "ready"), "the holder's command")
			if label := holderLabel(ctx, t, tg, "labelled"); label != "deploy job 42" {
				t.Errorf("holder label %q", label)
			}
			os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
			if code := p.wait(ctx, t); code != 0 {
				t.Fatalf("exit %d", code)
			}
			if code, _ := sqlockRun(ctx, t, dir, append(flags, "--holder", strings.Repeat("x", 257), "--", "touch", "ran")...); code != exitRunFailed || exists(filepath.Join(dir, "ran")) {
				t.Errorf("a 257-byte label: exit %d, ran %t; want %d, nothing run", code, exists(filepath.Join(dir, "ran")), exitRunFailed)
			}
		})
	}
}

// lose takes the lock called name away from its holder, by the backend's
// own fault.
func lose(ctx context.Context, t *testing.T, tg target, name string) {
	t.Helper()
	switch tg.backend {
	case "lease":
		res, err := tg.db.SQL().ExecContext(ctx, "DELETE FROM sqlock_leases WHERE name = $1", name)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("deleted %d lease rows, want 1", n)
		}
	case "advisory":
		var pid uint32
		if err := tg.db.SQL().QueryRowContext(ctx, `SELECT pid FROM pg_locks
			WHERE locktype = 'advisory' AND granted
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&pid); err != nil {
			t.Fatalf("the advisory holder: %v", err)
		}
		if err := tg.db.Cluster.TerminateBackend(ctx, pid); err != nil {
			t.Fatal(err)
		}
	case "redis":
		if n, err := tg.redis.Del(ctx, name).Result(); err != nil || n != 1 {
			t.Fatalf("DEL %s: %d, %v", name, n, err)
		}
	}
}

// TestRunForwardsSignalsToTheCommand: a signal sent to sqlock run reaches
// the command (its trap exits with a code of its own, which sqlock run
// returns), and the lock is released after it.
func TestRunForwardsSignalsToTheCommand(t *testing.T) {
	t.Parallel()
	// Run under nohup, this process would start its children with SIGHUP
	// ignored, and a shell cannot trap a signal ignored at its start.
	// While this process catches SIGHUP, its children start with the default.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(hup) })
	ctx := testCtx(t)
	tg := newTarget(t, "lease")
	for i, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1} {
		dir := t.TempDir()
		name := sig.String()
		script := fmt.Sprintf(`trap 'echo %[1]d >> out; exit %[2]d' %[1]d; echo ready > ready; while kill -0 $PPID 2>/dev/null; do sleep 0.02; done`, int(sig), 10+i)
		flags := append([]string{"--name", "signals", "--wait", "0"}, tg.flags...)
		p := start(ctx, t, dir, append(flags, "--", "sh", "-c", script)...)
		waitFile(ctx, t, filepath.Join(dir, "ready"), "the command's start")
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(ctx, t); code != 10+i {
			t.Errorf("%s: exit %d, want the command's %d", name, code, 10+i)
		}
		if got := readFile(t, filepath.Join(dir, "out")); got != fmt.Sprintf("%d\n", int(sig)) {
			t.Errorf("%s: the command's trap wrote %q", name, got)
		}
	}
}

// TestRunUnderNohupKeepsSIGHUPIgnored: started with SIGHUP ignored (as
// nohup starts it), sqlock run neither dies of a hangup nor passes it on;
// the command keeps running until a signal that is passed on ends it.
func TestRunUnderNohupKeepsSIGHUPIgnored(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tg := newTarget(t, "lease")
	dir := t.TempDir()
	script := `trap 'exit 9' USR1; echo ready > ready; while kill -0 $PPID 2>/dev/null; do sleep 0.02; done`
	args := append(append([]string{"--name", "nohup"}, tg.flags...), "--", "sh", "-c", script)
	p := startVia(ctx, t, dir, nil, append([]string{"sh", "-c", `trap '' HUP; exec "$0" run "$@"`, sqlockBinary(t)}, args...)...)
	waitFile(ctx, t, filepath.Join(dir, "ready"), "the command's start")
	p.cmd.Process.Signal(syscall.SIGHUP) // the kernel delivers it before USR1, a higher number
	p.cmd.Process.Signal(syscall.SIGUSR1)
	if code := p.wait(ctx, t); code != 9 {
		t.Fatalf("exit %d, want 9: the hangup was not ignored", code)
	}
}

// TestRunSignalWhileWaitingRunsNothing: a signal that arrives while sqlock
// run waits for the lock ends the wait: exit 128+N, the command never run.
func TestRunSignalWhileWaitingRunsNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tg := newTarget(t, "advisory")
	dir := t.TempDir()
	flags := append([]string{"--name", "queue"}, tg.flags...)
	holder := start(ctx, t, dir, append(flags, "--", "sh", "-c", holdScript)...)
	waitFile(ctx, t, filepath.Join(dir, "ready"), "the holder's command")
	waiter := start(ctx, t, dir, append(flags, "--wait", "1m", "--", "touch", "ran")...)
	for { // the waiter's wait is on the server: pg_locks shows it
		var n int
		if err := tg.db.SQL().QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
			t.Fatalf("the waiter never waited: %v", err)
		}
		if n > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	waiter.cmd.Process.Signal(syscall.SIGTERM)
	if code := waiter.wait(ctx, t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("waiter: exit %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
	if code := holder.wait(ctx, t); code != 0 {
		t.Errorf("holder: exit %d", code)
	}
	if exists(filepath.Join(dir, "ran")) {
		t.Fatal("the interrupted waiter ran its command")
	}
}

// TestRunUsageAndConnectionErrorsExit125: sqlock run's own failures exit
// 125, a code commands do not use, and run nothing.
func TestRunUsageAndConnectionErrorsExit125(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := pgtest.New(t)
	dir := t.TempDir()
	port, err := serverproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	closed := fmt.Sprintf("127.0.0.1:%d", port) // nothing listens there
	for _, args := range [][]string{
		{"--", "touch", "ran"},                                          // no --name
		{"--name", "x", "--dsn", db.DSN},                                // no command
		{"--name", "x", "--backend", "zookeeper", "--", "touch", "ran"}, // unknown backend
		{"--name", "x", "--dsn", db.DSN, "--wait", "-1s", "--", "touch", "ran"},
		{"--name", "x", "--dsn", db.DSN, "--ttl", "0s", "--", "touch", "ran"},
		{"--name", "x", "--dsn", db.DSN, "--grace", "-1s", "--", "touch", "ran"},
		{"--name", "x", "--dsn", db.DSN, "--backend", "advisory", "--ttl", "5s", "--", "touch", "ran"},
		{"--name", "x", "--dsn", db.DSN, "--backend", "advisory", "--holder", "me", "--", "touch", "ran"},
		{"--name", "x", "--dsn", db.DSN, "--table", "no-dashes", "--", "touch", "ran"},
		{"--name", "x", "--backend", "redis", "--", "touch", "ran"}, // no Redis address
		{"--name", "x", "--", "touch", "ran"},                       // no DSN
		{"--name", "x", "--bogus", "--", "touch", "ran"},            // unknown flag
		{"--name", "x", "--dsn", "postgres://u@" + closed + "/db", "--", "touch", "ran"},
		{"--name", "x", "--backend", "redis", "--redis", closed, "--", "touch", "ran"},
		{"--name", strings.Repeat("n", 300), "--dsn", db.DSN, "--", "touch", "ran"}, // longer than a lease name may be
	} {
		code, p := sqlockRun(ctx, t, dir, args...)
		if code != exitRunFailed {
			t.Errorf("%v: exit %d, want %d", args, code, exitRunFailed)
		}
		if !strings.HasPrefix(p.stderr.String(), "sqlock") {
			t.Errorf("%v: no message: %q", args, p.stderr.String())
		}
		if exists(filepath.Join(dir, "ran")) {
			t.Fatalf("%v: the command ran", args)
		}
	}
	if code, p := sqlockRun(ctx, t, dir, "--help"); code != 0 || !strings.Contains(p.stderr.String(), "121") {
		t.Errorf("--help: exit %d, %q", code, p.stderr.String())
	}
}
