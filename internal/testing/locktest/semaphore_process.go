package locktest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/versioned"
)

// The exclusion test's shape: 4 processes × 8 goroutines × 3 sections on
// a semaphore of 3.
const (
	semProcs      = 4
	semGoroutines = 8
	semSections   = 3
	semSize       = 3
)

// semWitness is the witness table in PostgreSQL: one row counting the
// holders inside (and the most ever inside), and a row per section entered,
// by its goroutine.
type semWitness struct {
	dsn, table string
	db         *sql.DB
}

func openWitness(dsn, table string) (*semWitness, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	return &semWitness{dsn: dsn, table: table, db: db}, nil
}

func (s *semaphoreSuite) newWitness(t *testing.T) *semWitness {
	w, err := openWitness(s.b.Witness(t, s.target), "locktest_semaphore_"+randomID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.db.Close() })
	if _, err := w.db.Exec(fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, inside int NOT NULL, peak int NOT NULL);
INSERT INTO %[1]s VALUES (1, 0, 0);
CREATE TABLE %[1]s_entries (who text NOT NULL)`, w.table)); err != nil {
		t.Fatal(err)
	}
	return w
}

// enter counts a holder in and returns how many are inside now.
func (w *semWitness) enter(ctx context.Context, who string) (int, error) {
	var inside int
	err := w.db.QueryRowContext(ctx, fmt.Sprintf(`WITH e AS (INSERT INTO %s_entries VALUES ($1))
UPDATE %[1]s SET inside = inside + 1, peak = greatest(peak, inside + 1) WHERE id = 1 RETURNING inside`, w.table), who).Scan(&inside)
	return inside, err
}

func (w *semWitness) leave(ctx context.Context) error {
	_, err := w.db.ExecContext(ctx, `UPDATE `+w.table+` SET inside = inside - 1 WHERE id = 1`)
	return err
}

// testSemaphoreProcesses: 4 worker processes — the test binary run again,
// each with a semaphore of its own — run 8 goroutines that each enter a
// semaphore of 3 three times; the witness in PostgreSQL counts the holders
// inside: never more than 3, every goroutine got in, and every section ran.
func testSemaphoreProcesses(t *testing.T, s *semaphoreSuite) {
	ctx := testCtx(t)
	w := s.newWitness(t)
	name := s.prefix + "procs"
	top, _, _ := strings.Cut(t.Name(), "/")
	var wg sync.WaitGroup
	errs := make([]error, semProcs)
	for p := range semProcs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+regexp.QuoteMeta(top)+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), envWorker+"="+semWorker(s.b.Name), envTarget+"="+s.target,
			envSemName+"="+name, envSemWitness+"="+w.dsn+" "+w.table+" "+strconv.Itoa(p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			if err != nil {
				errs[p] = fmt.Errorf("worker process %d: %v\n%s", p, err, out)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	var inside, peak, sections, goroutines int
	if err := w.db.QueryRow(fmt.Sprintf(`SELECT inside, peak, (SELECT count(*) FROM %[1]s_entries), (SELECT count(DISTINCT who) FROM %[1]s_entries)
FROM %[1]s WHERE id = 1`, w.table)).Scan(&inside, &peak, &sections, &goroutines); err != nil {
		t.Fatal(err)
	}
	switch {
	case peak > semSize:
		t.Fatalf("%d holders inside a semaphore of %d at once, counted by the database", peak, semSize)
	case goroutines != semProcs*semGoroutines:
		t.Fatalf("%d of %d goroutines got in: some starved", goroutines, semProcs*semGoroutines)
	case sections != semProcs*semGoroutines*semSections || inside != 0:
		t.Fatalf("%d sections ran (%d still inside); want %d", sections, inside, semProcs*semGoroutines*semSections)
	}
	t.Logf("%d sections in %d processes, at most %d of %d inside", sections, semProcs, peak, semSize)
}

// semaphoreWorker is a worker process of testSemaphoreProcesses: its
// goroutines' sections, each counted in and out by the witness; a count
// above the size fails the process.
func semaphoreWorker(t *testing.T, b SemaphoreBackend) {
	f := strings.Fields(os.Getenv(envSemWitness))
	w, err := openWitness(f[0], f[1])
	if err != nil {
		t.Fatal(err)
	}
	defer w.db.Close()
	h := b.Open(t, os.Getenv(envTarget))
	sem := h.New(semSize, Options{TTL: roomyTTL, Timeout: roomyWait})
	name := os.Getenv(envSemName)
	ctx, cancel := context.WithTimeout(context.Background(), roomyWait)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, semGoroutines)
	for g := range semGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := f[2] + "/" + strconv.Itoa(g)
			for range semSections {
				if err := semSection(ctx, sem, w, name, who); err != nil {
					errs <- fmt.Errorf("goroutine %s: %w", who, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func semSection(ctx context.Context, sem sqlock.SemaphoreAcquirer, w *semWitness, name, who string) error {
	sl, err := sem.Acquire(ctx, name)
	if err != nil {
		return err
	}
	defer sl.Release(ctx)
	inside, err := w.enter(ctx, who)
	if err != nil {
		return err
	}
	if inside > semSize {
		return fmt.Errorf("%d inside a semaphore of %d", inside, semSize)
	}
	time.Sleep(2 * time.Millisecond)
	if err := sl.Err(); err != nil {
		return err
	}
	return w.leave(ctx)
}

// pausedTTL is the TTL of the slot whose holder the suite pauses: the
// next holder waits for it to expire. etcd grants no lease shorter than
// 1.5 of its election timeouts (2 s by default).
const pausedTTL = 2 * time.Second

// testSemaphorePaused: a worker process takes a slot of a semaphore of 2
// (the other held by the test) and is stopped (SIGSTOP). Another holder
// gets that slot, with a greater token, once it expires, and writes the
// slot's register fenced by its token; continued, the paused holder's Lost
// has fired and its fenced write is refused by the lock:"fence" column.
func testSemaphorePaused(t *testing.T, s *semaphoreSuite) {
	ctx := testCtx(t)
	const n = 2
	name := s.prefix + "paused"
	first := must[sqlock.Slot](t, "TryAcquire")(s.semaphore(n, Options{}).TryAcquire(ctx, name))
	defer release(t, first)
	reg, err := openRegister(s.b.Witness(t, s.target), "locktest_slot_register_"+randomID())
	if err != nil {
		t.Fatal(err)
	}
	defer reg.db.Close()
	if _, err := reg.db.Exec(fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, value text, version bigint NOT NULL, fence bigint);
INSERT INTO %[1]s VALUES (1, '', 1, NULL)`, reg.table)); err != nil {
		t.Fatal(err)
	}

	top, _, _ := strings.Cut(t.Name(), "/")
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+regexp.QuoteMeta(top)+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), envWorker+"="+semPauser(s.b.Name), envTarget+"="+s.target,
		envSemName+"="+name, envSemWitness+"="+reg.dsn+" "+reg.table)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	p := &leaderProcess{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	var index int
	var token int64
	if _, err := fmt.Sscan(p.expect(t, "SLOT "), &index, &token); err != nil || index == first.Index() {
		t.Fatalf("the worker's slot: %d %d (%v); the test holds slot %d", index, token, err, first.Index())
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next := must[sqlock.Slot](t, "Acquire of the paused holder's slot")(s.semaphore(n, Options{TTL: pausedTTL}).Acquire(ctx, name))
	defer release(t, next)
	if next.Index() != index || next.Token() <= token {
		t.Fatalf("after the paused holder's slot %d (token %d): slot %d token %d", index, token, next.Index(), next.Token())
	}
	nctx, cancel := next.Context(ctx)
	defer cancel()
	if err := reg.write(nctx, "next holder"); err != nil {
		t.Fatalf("the next holder's fenced write: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin)
	if got, want := p.expect(t, "RESULT "), "lost=true write=ErrFenced"; got != want {
		t.Fatalf("the paused holder: %q, want %q", got, want)
	}
	if value, fence := reg.read(t); value != "next holder" || fence != next.Token() {
		t.Fatalf("register = %q fenced at %d, want the next holder's write at %d", value, fence, next.Token())
	}
}

// pausedSlotWorker is the worker process of testSemaphorePaused: it takes
// a slot, says "SLOT <index> <token>", waits for a line on stdin, then, as
// a holder that ignored its loss would, writes the register with its
// slot's token and says "RESULT lost=<Lost had fired> write=<outcome>".
func pausedSlotWorker(t *testing.T, b SemaphoreBackend) {
	h := b.Open(t, os.Getenv(envTarget))
	dsn, table, _ := strings.Cut(os.Getenv(envSemWitness), " ")
	reg, err := openRegister(dsn, table)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), roomyWait)
	defer cancel()
	sl, err := h.New(2, Options{TTL: pausedTTL, Timeout: roomyWait}).TryAcquire(ctx, os.Getenv(envSemName))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SLOT %d %d\n", sl.Index(), sl.Token())
	bufio.NewReader(os.Stdin).ReadString('\n')
	lost := isLost(sl)
	sctx, stop := sl.Context(ctx)
	defer stop()
	write := "nil"
	if err := reg.write(context.WithoutCancel(sctx), "paused holder"); errors.Is(err, versioned.ErrFenced) {
		write = "ErrFenced"
	} else if err != nil {
		write = strconv.Quote(err.Error())
	}
	fmt.Printf("RESULT lost=%t write=%s\n", lost, write)
	sl.Release(ctx)
}
