package idem_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/idem"
)

// child starts the test binary as a worker with the given role and
// environment, its stdout read line by line.
func child(t *testing.T, role string, env ...string) (*exec.Cmd, *bufio.Scanner, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewScanner(stdout), stdin
}

const (
	onceProcs      = 4
	onceGoroutines = 16
)

// TestIdenticalRequestsAcrossProcesses: 4 OS processes × 16 goroutines
// send the same request at once, through Do and through the middleware:
// it takes effect once (one effects row, from one process), and all 64
// results are byte-identical.
func TestIdenticalRequestsAcrossProcesses(t *testing.T) {
	leakCheck(t)
	for _, role := range []string{"once-func", "once-http"} {
		t.Run(role, func(t *testing.T) {
			db := newDB(t)
			type proc struct {
				out   *bufio.Scanner
				stdin io.WriteCloser
			}
			procs := make([]proc, onceProcs)
			for p := range procs {
				_, out, stdin := child(t, role, "IDEM_DSN="+db.DSN, "IDEM_KEY=order-42",
					"IDEM_PROC="+strconv.Itoa(p), "IDEM_GOROUTINES="+strconv.Itoa(onceGoroutines))
				if !out.Scan() || out.Text() != "READY" {
					t.Fatalf("process %d: %q", p, out.Text())
				}
				procs[p] = proc{out, stdin}
			}
			for _, p := range procs {
				if _, err := io.WriteString(p.stdin, "GO\n"); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			var results []string
			var wg sync.WaitGroup
			for _, p := range procs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for p.out.Scan() {
						if r, ok := strings.CutPrefix(p.out.Text(), "RESULT "); ok {
							mu.Lock()
							results = append(results, r)
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			if len(results) != onceProcs*onceGoroutines {
				t.Fatalf("%d results, want %d", len(results), onceProcs*onceGoroutines)
			}
			for i, r := range results {
				if r != results[0] || strings.HasPrefix(r, "error") {
					t.Fatalf("result %d = %s, want %s", i, r, results[0])
				}
			}
			if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
			t.Logf("64 results, one effect: %s", results[0])
		})
	}
}

// TestKilledInsideFnLeavesNoKey: a process killed with SIGKILL inside fn
// (its claim and its write uncommitted) leaves neither: the server rolls
// its transaction back, and a retry claims the key and runs fn once.
func TestKilledInsideFnLeavesNoKey(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	cmd, out, _ := child(t, "killed", "IDEM_DSN="+db.DSN, "IDEM_KEY=k", "IDEM_PROC=0")
	if !out.Scan() || !strings.HasPrefix(out.Text(), "INSIDE ") {
		t.Fatalf("child: %q", out.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The retry waits on the key's unique index until the server has
	// rolled the dead client's transaction back.
	runs := 0
	err := pgx.BeginFunc(ctx, db.Pool(), func(tx pgx.Tx) error {
		_, err := idem.Do(ctx, tx, "", "k", nil, func(ctx context.Context) (int, error) {
			runs++
			_, err := tx.Exec(ctx, `INSERT INTO effects (key, who) VALUES ('k', 'retry')`)
			return 1, err
		})
		return err
	})
	if err != nil || runs != 1 {
		t.Fatalf("retry: %v, %d runs", err, runs)
	}
	if n := count(t, db, `SELECT count(*) FROM effects WHERE who = 'killed'`); n != 0 {
		t.Fatal("the killed process's write survived")
	}
	if n := count(t, db, `SELECT count(*) FROM effects`) + count(t, db, `SELECT count(*) FROM sqlock_idem`); n != 2 {
		t.Fatalf("%d rows of effects and keys, want the retry's 1 + 1", n)
	}
}
