package locktest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the register's driver

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/exclusiontest"
	"github.com/sqlock/sqlock/versioned"
)

// The environment of a candidate process (besides envWorker and
// envTarget).
const (
	envElectName     = "LOCKTEST_ELECTION_NAME"
	envElectIdentity = "LOCKTEST_ELECTION_IDENTITY"
	envElectRegister = "LOCKTEST_ELECTION_REGISTER" // its DSN and table, space-separated
	envElectRole     = "LOCKTEST_ELECTION_ROLE"     // "terms": the campaigns of testTermsAcrossProcesses
)

// electionWorkerName is envWorker's value in b's candidate processes: no
// lock suite's worker answers to it.
func electionWorkerName(backend string) string { return "election:" + backend }

// registerRow is the row the leaders write, fenced by their terms: its
// lock:"fence" column refuses a term smaller than the last writer's.
type registerRow struct {
	ID      int64
	Value   string
	Version int64 `lock:"version"`
	Fence   int64 `lock:"fence"`
}

// fencedRegister is a register table of its own in a PostgreSQL database.
type fencedRegister struct {
	dsn, table string
	db         *sql.DB
}

func openRegister(dsn, table string) (*fencedRegister, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	return &fencedRegister{dsn: dsn, table: table, db: db}, nil
}

// newRegister creates a register table with its one row.
func (s *electionSuite) newRegister(t *testing.T) *fencedRegister {
	r, err := openRegister(s.b.Register(t, s.target), "locktest_register_"+randomID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.db.Close() })
	if _, err := r.db.Exec(fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, value text, version bigint NOT NULL, fence bigint);
INSERT INTO %[1]s VALUES (1, '', 1, NULL)`, r.table)); err != nil {
		t.Fatal(err)
	}
	return r
}

// write writes value with the fencing token ctx carries: refused with
// versioned.ErrFenced once a larger token has written.
func (r *fencedRegister) write(ctx context.Context, value string) error {
	var version int64
	if err := r.db.QueryRowContext(ctx, `SELECT version FROM `+r.table+` WHERE id = 1`).Scan(&version); err != nil {
		return err
	}
	row := registerRow{ID: 1, Value: value, Version: version}
	return versioned.UpdateStruct(ctx, r.db, versioned.MustTable(r.table), &row, versioned.Set("value", value))
}

// read returns the register's value and fence.
func (r *fencedRegister) read(t *testing.T) (string, int64) {
	var value string
	var fence sql.NullInt64
	if err := r.db.QueryRow(`SELECT value, fence FROM `+r.table+` WHERE id = 1`).Scan(&value, &fence); err != nil {
		t.Fatal(err)
	}
	return value, fence.Int64
}

// leaderProcess is a candidate process: the test binary run again.
type leaderProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	term  int64
}

// startLeader starts a candidate process on target, called identity, in
// the election tag, writing reg, and returns once it leads.
func (s *electionSuite) startLeader(ctx context.Context, t *testing.T, target, tag, identity string, reg *fencedRegister) *leaderProcess {
	top, _, _ := strings.Cut(t.Name(), "/")
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+regexp.QuoteMeta(top)+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), envWorker+"="+electionWorkerName(s.b.Name), envTarget+"="+target,
		envElectName+"="+s.prefix+tag, envElectIdentity+"="+identity, envElectRegister+"="+reg.dsn+" "+reg.table)
	cmd.Stderr = os.Stderr
	p := &leaderProcess{cmd: cmd}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
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
	p.out = bufio.NewScanner(stdout)
	line := p.expect(t, "LEADER ")
	if p.term, err = strconv.ParseInt(line, 10, 64); err != nil || p.term <= 0 {
		t.Fatalf("candidate process: %q after LEADER", line)
	}
	return p
}

// expect returns what follows prefix on the process's next line that
// begins with it, or fails t: the process never said it (it exited, or
// the test's context ended and killed it).
func (p *leaderProcess) expect(t *testing.T, prefix string) string {
	t.Helper()
	for p.out.Scan() {
		if rest, ok := strings.CutPrefix(p.out.Text(), prefix); ok {
			return rest
		}
		t.Log("candidate process:", p.out.Text())
	}
	t.Fatalf("the candidate process never said %q (%v)", prefix, p.out.Err())
	return ""
}

// electionWorker is a candidate process: it campaigns, says "LEADER
// <term>", and waits for a line on stdin; then, as a leader that ignored
// its loss would, it writes the register with its leadership's fencing
// token, and says "RESULT lost=<Lost had fired> write=<the write's
// outcome>".
func electionWorker(t *testing.T, b ElectionBackend) {
	h := b.Open(t, os.Getenv(envTarget))
	if os.Getenv(envElectRole) == "terms" {
		termsWorker(t, h)
		return
	}
	dsn, table, _ := strings.Cut(os.Getenv(envElectRegister), " ")
	reg, err := openRegister(dsn, table)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), roomyWait)
	defer cancel()
	e := h.New(Candidate{Name: os.Getenv(envElectName), Identity: os.Getenv(envElectIdentity), TTL: electTTL, Timeout: roomyWait})
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("LEADER %d\n", l.Token())
	bufio.NewReader(os.Stdin).ReadString('\n')
	lost := isLost(l)
	lctx, stop := l.Context(ctx)
	defer stop()
	write := "nil"
	// The leadership's context has ended (lost); the write runs on one
	// that has not, carrying the same term.
	if err := reg.write(context.WithoutCancel(lctx), "deposed leader"); errors.Is(err, versioned.ErrFenced) {
		write = "ErrFenced"
	} else if err != nil {
		write = strconv.Quote(err.Error())
	}
	fmt.Printf("RESULT lost=%t write=%s\n", lost, write)
	l.Resign(ctx)
}

// takeOver is the test process's candidate winning after a deposed
// leader of term old: with a greater term, read as the leader, and
// writing the fencedRegister fenced by its term.
func (s *electionSuite) takeOver(ctx context.Context, t *testing.T, tag string, old int64, reg *fencedRegister) sqlock.Leadership {
	t.Helper()
	e := s.candidate(tag, "next", Candidate{TTL: electTTL})
	l := campaign(ctx, t, e, "the next candidate")
	if l.Token() <= old {
		t.Fatalf("term %d after the deposed leader's %d", l.Token(), old)
	}
	if id, term, err := e.Leader(ctx); err != nil || id != "next" || term != l.Token() {
		t.Fatalf("Leader after the takeover: %q, %d, %v; want next, %d", id, term, describe(err), l.Token())
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	if err := reg.write(lctx, "next leader"); err != nil {
		t.Fatalf("the next leader's fenced write: %v", err)
	}
	return l
}

// deposed tells a stopped or cut-off candidate process to write, and
// checks that it knew it was deposed and that its write was refused.
func (p *leaderProcess) deposed(t *testing.T, reg *fencedRegister, next sqlock.Leadership) {
	t.Helper()
	fmt.Fprintln(p.stdin)
	if got, want := p.expect(t, "RESULT "), "lost=true write=ErrFenced"; got != want {
		t.Fatalf("deposed leader process: %q, want %q", got, want)
	}
	if value, fence := reg.read(t); value != "next leader" || fence != next.Token() {
		t.Fatalf("fencedRegister = %q fenced at %d, want the next leader's write at %d", value, fence, next.Token())
	}
}

// testKilledLeader: the leader's process is killed (SIGKILL, no
// resignation); another candidate wins once the leadership expires, with
// a greater term, and an observer in the test process reports the killed
// leader, then the next. The failover time is reported, not asserted.
func testKilledLeader(t *testing.T, s *electionSuite) {
	ctx := testCtx(t)
	reg := s.newRegister(t)
	p := s.startLeader(ctx, t, s.target, "killed", "doomed", reg)
	if id, term, err := s.candidate("killed", "reader", Candidate{}).Leader(ctx); err != nil || id != "doomed" || term != p.term {
		t.Fatalf("Leader while the process leads: %q, %d, %v; want doomed, %d", id, term, describe(err), p.term)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	changes, err := s.candidate("killed", "watcher", Candidate{}).Observe(octx)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	observed(ctx, t, changes, sqlock.Leader{Identity: "doomed", Term: p.term})
	killed := time.Now()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
	next := s.takeOver(ctx, t, "killed", p.term, reg)
	t.Logf("failover after SIGKILL of the leader (TTL %v): %v", electTTL, time.Since(killed).Round(time.Millisecond))
	observed(ctx, t, changes, sqlock.Leader{Identity: "next", Term: next.Token()})
	resign(t, next)
}

// observed reads changes until it reports want, or fails t saying that
// it never did.
func observed(ctx context.Context, t *testing.T, changes <-chan sqlock.Leader, want sqlock.Leader) {
	t.Helper()
	for {
		select {
		case l, ok := <-changes:
			if !ok {
				t.Fatalf("Observe closed before it reported %+v", want)
			}
			if l == want {
				return
			}
		case <-ctx.Done():
			t.Fatalf("Observe never reported %+v", want)
		}
	}
}

// testPausedLeader: the leader's process is stopped (SIGSTOP). Another
// candidate wins with a greater term and writes the fencedRegister; continued,
// the deposed leader's Lost has fired and its fenced write is refused by
// the lock:"fence" column.
func testPausedLeader(t *testing.T, s *electionSuite) {
	ctx := testCtx(t)
	reg := s.newRegister(t)
	p := s.startLeader(ctx, t, s.target, "paused", "paused", reg)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next := s.takeOver(ctx, t, "paused", p.term, reg)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	p.deposed(t, reg, next)
	resign(t, next)
}

// testPartitionedLeaderProcess: the leader's process reaches the servers
// through a proxy that is stalled (a partition; its fencedRegister stays
// reachable). Another candidate wins with a greater term and writes the
// fencedRegister; the deposed leader's Lost has fired and its fenced write is
// refused.
func testPartitionedLeaderProcess(t *testing.T, s *electionSuite) {
	ctx := testCtx(t)
	reg := s.newRegister(t)
	proxied, stall, resume := s.b.Proxy(t, s.target)
	p := s.startLeader(ctx, t, proxied, "cut", "cut-off", reg)
	stall()
	next := s.takeOver(ctx, t, "cut", p.term, reg)
	p.deposed(t, reg, next)
	resume()
	resign(t, next)
}

// The shape of testTermsAcrossProcesses: 3 processes × 3 goroutines × 4
// terms each, in one election.
const (
	termProcs      = 3
	termGoroutines = 3
	termRounds     = 4
)

// testTermsAcrossProcesses: candidates in several OS processes campaign
// again and again in one election; a witness in files
// (exclusiontest.Files) checks that no two leaderships overlap and that
// each term is above the one before it, and each leader reads itself as
// the leader with its term while it leads.
func testTermsAcrossProcesses(t *testing.T, s *electionSuite) {
	top, _, _ := strings.Cut(t.Name(), "/")
	cfg := exclusiontest.Config{Procs: termProcs, Goroutines: termGoroutines, Keys: 1, N: termRounds,
		Worker: func(int) *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(top)+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), envWorker+"="+electionWorkerName(s.b.Name), envTarget+"="+s.target,
				envElectName+"="+s.prefix+"terms-procs", envElectRole+"=terms")
			return cmd
		}}
	sum := exclusiontest.RunFiles(t, cfg)
	t.Logf("%d terms in %d processes, none overlapping, each above the last (%d leaderships lost and reported)", sum.Sections, termProcs, sum.Lost)
}

// termsWorker is a candidate process of testTermsAcrossProcesses: each
// section is one leadership, entered in the witness with its term.
func termsWorker(t *testing.T, h ElectionHarness) {
	w, err := exclusiontest.OpenFiles()
	if err != nil {
		t.Fatal(err)
	}
	name := os.Getenv(envElectName)
	const work = 2 * time.Millisecond
	exclusiontest.Child(func(ctx context.Context, me string, k int) exclusiontest.Outcome {
		e := h.New(Candidate{Name: name, Identity: me, TTL: roomyTTL, Timeout: roomyWait})
		l, err := e.Campaign(ctx)
		if err != nil {
			return exclusiontest.Outcome{Err: err}
		}
		term := l.Token()
		o := exclusiontest.FencedSection(
			func() (int64, error) {
				n, err := w.EnterFenced(k, me, term)
				if err == nil && n == 1 {
					if id, got, lerr := e.Leader(ctx); lerr != nil || id != me || got != term {
						return n, fmt.Errorf("the leader read while %s leads term %d: %q, %d, %v", me, term, id, got, lerr)
					}
				}
				return n, err
			},
			func() (int64, error) { return w.LeaveFenced(k, me, term) },
			// A Leadership has no Deadline: a lost one is past it.
			work, func() time.Time {
				if l.Err() != nil {
					return time.Time{}
				}
				return time.Now().Add(time.Hour)
			})
		if err := l.Resign(ctx); err != nil && o.Err == nil {
			if l.Err() != nil {
				o.Lost = true
			} else {
				o.Err = err
			}
		}
		return o
	})
}
