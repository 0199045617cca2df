// Package scripts holds the tests of the shell scripts the Makefile runs.
package scripts

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeAptGet puts an apt-get first on PATH that appends its arguments to a
// log ($CALLS) and then runs body (sh); it returns the PATH and the log's
// path.
func fakeAptGet(t *testing.T, body string) (path, calls string) {
	t.Helper()
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	script := "#!/bin/sh\nCALLS='" + calls + "'\necho \"$*\" >> \"$CALLS\"\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(dir, "apt-get"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH"), calls
}

func readCalls(t *testing.T, calls string) []string {
	t.Helper()
	b, err := os.ReadFile(calls)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// run runs bash with the script's functions sourced and then code.
func run(t *testing.T, path, code string) (stdout, stderr string, exit int) {
	t.Helper()
	cmd := exec.Command("bash", "-c", "source ./ensure-deps.sh\n"+code)
	cmd.Env = append(os.Environ(), "PATH="+path)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), exit
}

// What make test needs (and so what this test binary runs beside) is
// installed: the script must not call apt at all, as root or not.
func TestEnsureDepsIsANoOpWhenEverythingIsPresent(t *testing.T) {
	path, calls := fakeAptGet(t, "exit 1")
	for _, pkg := range []string{"postgresql", "pgbouncer"} {
		if _, _, exit := run(t, path, "have "+pkg); exit != 0 {
			t.Fatalf("%s is not installed: make test installs it first (make deps)", pkg)
		}
	}
	for _, pkgs := range []string{"postgresql", "postgresql pgbouncer"} {
		cmd := exec.Command("./ensure-deps.sh", strings.Fields(pkgs)...)
		cmd.Env = append(os.Environ(), "PATH="+path)
		out, err := cmd.CombinedOutput()
		if err != nil || len(out) != 0 {
			t.Errorf("ensure-deps.sh %s: %v, output %q", pkgs, err, out)
		}
	}
	if c := readCalls(t, calls); c != nil {
		t.Errorf("apt-get was called: %q", c)
	}
}

// Only what is missing is installed: the demo's postgresql alone never
// brings PgBouncer.
func TestEnsureDepsInstallsOnlyWhatIsMissing(t *testing.T) {
	path, _ := fakeAptGet(t, "exit 1")
	const fake = `have() { [ "$1" = postgresql ]; }; id() { echo 0; }; install_packages() { echo "install $*"; }; `
	for pkgs, want := range map[string]string{
		"postgresql":                        "",
		"postgresql pgbouncer":              "install pgbouncer\n",
		"postgresql redis-server pgbouncer": "install redis-server pgbouncer\n",
	} {
		out, stderr, exit := run(t, path, fake+"main "+pkgs)
		if exit != 0 || out != want {
			t.Errorf("main %s: exit %d, installs %q, want %q (stderr %q)", pkgs, exit, out, want, stderr)
		}
	}
}

func TestEnsureDepsPrintsTheAptLineWhenNotRoot(t *testing.T) {
	path, calls := fakeAptGet(t, "exit 1")
	_, stderr, exit := run(t, path,
		`have() { [ "$1" = postgresql ]; }; id() { echo 1000; }; main postgresql pgbouncer redis-server`)
	const line = "\n  sudo apt-get update && sudo apt-get install -y pgbouncer redis-server\n"
	if exit != 1 || !strings.Contains(stderr, line) {
		t.Errorf("exit %d, stderr %q; want 1 and %q", exit, stderr, line)
	}
	if c := readCalls(t, calls); c != nil {
		t.Errorf("apt-get was called: %q", c)
	}
}

func TestEnsureDepsRefusesUnknownPackages(t *testing.T) {
	for _, args := range [][]string{{"postgresql", "nginx"}, nil} {
		cmd := exec.Command("./ensure-deps.sh", args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "known: postgresql pgbouncer redis-server mariadb-server nodejs npm etcd-server") {
			t.Errorf("ensure-deps.sh %q: %v, %q; want exit 2 naming the known packages", args, err, out)
		}
	}
}

// apt_get tries a run that failed on a lock again, with DPkg::Lock::Timeout
// on every run, and returns any other failure at once.
func TestEnsureDepsWaitsForTheAptLock(t *testing.T) {
	const lockErr = `echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1 (apt-get)" >&2; exit 100`
	t.Run("held twice", func(t *testing.T) {
		path, calls := fakeAptGet(t, `if [ "$(wc -l < "$CALLS")" -le 2 ]; then `+lockErr+`; fi`)
		_, stderr, exit := run(t, path, `lock_poll=0.01; apt_get update -qq`)
		c := readCalls(t, calls)
		if exit != 0 || len(c) != 3 {
			t.Fatalf("exit %d after %d runs (%q), stderr %q; want 0 after 3", exit, len(c), c, stderr)
		}
		for _, call := range c {
			if call != "-o DPkg::Lock::Timeout=600 update -qq" {
				t.Errorf("apt-get %s", call)
			}
		}
		if strings.Count(stderr, "waiting up to 600s for another apt run") != 1 {
			t.Errorf("stderr %q: want one waiting line", stderr)
		}
	})
	t.Run("held past the deadline", func(t *testing.T) {
		path, calls := fakeAptGet(t, lockErr)
		_, stderr, exit := run(t, path, `lock_timeout=0; apt_get update -qq`)
		if c := readCalls(t, calls); exit != 100 || len(c) != 1 || !strings.Contains(stderr, "Could not get lock") {
			t.Errorf("exit %d after %d runs, stderr %q; want 100 after 1, with apt's error", exit, len(c), stderr)
		}
	})
	t.Run("other failure", func(t *testing.T) {
		path, calls := fakeAptGet(t, `echo "E: Unable to locate package nope" >&2; exit 100`)
		_, stderr, exit := run(t, path, `apt_get install -y nope`)
		if c := readCalls(t, calls); exit != 100 || len(c) != 1 || !strings.Contains(stderr, "Unable to locate package") {
			t.Errorf("exit %d after %d runs, stderr %q; want 100 after 1, with apt's error", exit, len(c), stderr)
		}
	})
}

// The real apt-get, against a lists directory of the test's own whose lock
// this process holds (an fcntl lock, as apt's): `apt-get update` fails at
// once on the held lock, so apt_get must wait, and succeed once the lock
// is released — released here when apt_get says it is waiting.
func TestEnsureDepsWaitsForARealAptListsLock(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Fatal("apt-get not found: the script installs from Debian's packages and needs it")
	}
	dir := t.TempDir()
	lists := filepath.Join(dir, "lists")
	for _, d := range []string{filepath.Join(lists, "partial"), filepath.Join(dir, "sources.list.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "sources.list"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(lists, "lock"), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	fl := syscall.Flock_t{Type: syscall.F_WRLCK}
	if err := syscall.FcntlFlock(lock.Fd(), syscall.F_SETLK, &fl); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("bash", "-c", `source ./ensure-deps.sh; lock_poll=0.05; apt_get \
		-o Dir::State::Lists="$1/lists/" -o Dir::Etc::SourceList="$1/sources.list" \
		-o Dir::Etc::SourceParts="$1/sources.list.d/" update -qq`, "bash", dir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	waited := false
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if !waited && strings.Contains(sc.Text(), "waiting up to 600s for another apt run: E: Could not get lock") {
			waited = true
			fl.Type = syscall.F_UNLCK
			if err := syscall.FcntlFlock(lock.Fd(), syscall.F_SETLK, &fl); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil || !waited {
		t.Fatalf("apt_get: %v, waited %v; stderr:\n%s", err, waited, log.String())
	}
}
