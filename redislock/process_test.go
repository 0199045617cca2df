package redislock_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/pgtest"
	"github.com/sqlock/sqlock/internal/redistest"
	"github.com/sqlock/sqlock/redislock"
)

// child starts the test binary as a worker with the given role and
// environment.
func child(role string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role}, env...)...)
	return cmd
}

const (
	exclusionProcs      = 4
	exclusionGoroutines = 8
	exclusionKeys       = 4
)

// TestExclusionAcrossProcesses: 4 OS processes × 8 goroutines × N
// acquisitions on 4 lock names with TTL 500 ms and random hold times, on
// one server (N = 320, fenced: each holder's token must exceed the one
// before it) and on Redlock over 5 servers (N = 160); PostgreSQL checks that
// no two sections of a name overlap. REDIS_EXCLUSION_N overrides N.
func TestExclusionAcrossProcesses(t *testing.T) {
	leakCheck(t)
	for _, c := range []struct {
		name    string
		servers int
		n       int
	}{
		{"single", 1, 320},
		// Redlock polls 5 servers per attempt: half the sections keep the
		// package's tests within a minute on a busy 2-core machine;
		// REDIS_EXCLUSION_N=320 runs 10,240 here too.
		{"redlock-5", 5, 160},
	} {
		t.Run(c.name, func(t *testing.T) {
			servers := redistest.NewN(t, c.servers, redistest.Options{})
			addrs := make([]string, len(servers))
			for i, s := range servers {
				addrs[i] = s.Addr
			}
			db := pgtest.New(t)
			db.Exec(`CREATE TABLE excl (k int PRIMARY KEY, holder text, last_token bigint NOT NULL DEFAULT 0, n bigint NOT NULL DEFAULT 0)`)
			db.Exec(fmt.Sprintf(`INSERT INTO excl (k) SELECT generate_series(0, %d)`, exclusionKeys-1))
			n := c.n
			if v, err := strconv.Atoi(os.Getenv("REDIS_EXCLUSION_N")); err == nil && v > 0 {
				n = v
			}
			start := time.Now()
			type result struct {
				sections, overlaps, errs, lost int
				out                            string
			}
			results := make([]result, exclusionProcs)
			var wg sync.WaitGroup
			for p := range exclusionProcs {
				wg.Go(func() {
					cmd := child("exclusion", "REDIS_ADDRS="+strings.Join(addrs, ","), "REDIS_DSN="+db.DSN,
						"REDIS_TTL=500ms", "REDIS_PROC="+strconv.Itoa(p), "REDIS_N="+strconv.Itoa(n),
						"REDIS_GOROUTINES="+strconv.Itoa(exclusionGoroutines), "REDIS_KEYS="+strconv.Itoa(exclusionKeys))
					out, err := cmd.CombinedOutput()
					res := &results[p]
					res.out = string(out)
					if err != nil {
						res.errs = -1
						return
					}
					sc := bufio.NewScanner(bytes.NewReader(out))
					for sc.Scan() {
						fmt.Sscanf(sc.Text(), "RESULT sections=%d overlaps=%d errors=%d lost=%d", &res.sections, &res.overlaps, &res.errs, &res.lost)
					}
				})
			}
			wg.Wait()
			total, lost := 0, 0
			for p, res := range results {
				lost += res.lost
				if res.errs != 0 || res.overlaps != 0 || res.sections != exclusionGoroutines*n {
					t.Errorf("process %d: %d sections, %d overlaps, %d errors; output:\n%s", p, res.sections, res.overlaps, res.errs, res.out)
				}
				total += res.sections
			}
			var sum int64
			var held int
			if err := db.SQL().QueryRow(`SELECT sum(n), count(holder) FROM excl`).Scan(&sum, &held); err != nil {
				t.Fatal(err)
			}
			if sum != int64(total) || held != 0 {
				t.Fatalf("counters sum to %d after %d sections, %d rows still marked held", sum, total, held)
			}
			t.Logf("%d processes × %d goroutines × %d sections on %d names = %d acquisitions, 0 overlaps, %d locks lost under load (reported), in %v",
				exclusionProcs, exclusionGoroutines, n, exclusionKeys, total, lost, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestPausedHolderIsFencedOut: a child process holding a single-server
// lock is stopped with SIGSTOP for 2 × TTL. Another holder gets the lock
// within TTL (plus a margin calibrated to this machine) of the pause and
// writes the register with its larger token. After SIGCONT the child's Lost
// has fired before it tries to write, its fenced versioned write is
// refused by PostgreSQL with versioned.ErrFenced, and its Release changes
// nothing (ErrNotHeld).
func TestPausedHolderIsFencedOut(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{})
	db := pgtest.New(t)
	db.Exec(`CREATE TABLE register (id int PRIMARY KEY, value text, version bigint NOT NULL, fence bigint NOT NULL)`)
	db.Exec(`INSERT INTO register VALUES (1, 'initial', 1, 0)`)
	ctx := context.Background()
	lat := s.Latency(t)
	ttl := max(500*time.Millisecond, 50*lat)
	cmd := child("paused", "REDIS_ADDRS="+s.Addr, "REDIS_DSN="+db.DSN, "REDIS_NAME=paused", "REDIS_TTL="+ttl.String())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "ACQUIRED ") {
		t.Fatalf("child: %q", lines.Text())
	}
	childToken, _ := strconv.ParseInt(strings.TrimPrefix(lines.Text(), "ACQUIRED "), 10, 64)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	l, err := redislock.New(s.Client(t, nil)).Acquire(ctx, "paused", ttl)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(paused)
	defer l.Release(ctx)
	if bound := ttl + max(100*time.Millisecond, 20*lat); took > bound || l.Token() <= childToken {
		t.Fatalf("took over %v after the pause (bound %v), token %d after the child's %d", took, bound, l.Token(), childToken)
	}
	if err := fencedWrite(ctx, db.SQL(), "new holder", l.Token()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(paused.Add(2 * ttl))) // the fault: the pause lasts 2 × TTL
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "write\n")
	if !lines.Scan() {
		t.Fatal("child said nothing")
	}
	if got, want := lines.Text(), "RESULT lost=true write=ErrFenced release=true"; got != want {
		t.Fatalf("child: %s, want %s", got, want)
	}
	var value string
	var fence int64
	if err := db.SQL().QueryRow(`SELECT value, fence FROM register WHERE id = 1`).Scan(&value, &fence); err != nil {
		t.Fatal(err)
	}
	if value != "new holder" || fence != l.Token() || l.Err() != nil {
		t.Fatalf("register %q fence %d; new holder's Err %v", value, fence, l.Err())
	}
	t.Logf("TTL %v: taken over %v after the pause; the paused holder's write refused by PostgreSQL", ttl, took.Round(time.Millisecond))
}
