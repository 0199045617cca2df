package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/lease"
)

// The paused holder: replica A takes the lock for an account, reads its
// balance and is frozen (SIGSTOP) before it writes, for twice the lease's
// TTL — a GC pause, a stalled VM. Replica B then asks for the lock and
// deposits 100. A resumes and writes the deposit it computed before the
// pause. Both deposits must count: a final balance short of 200 is a lost
// update.
//
// The order is the harness's, not the scheduler's: A waits on its stdin
// between the read and the write, is stopped there, and is resumed only
// after B has written (or, when the lock cannot move, after the pause), so
// the outcome of every strategy is the same on every run.
const (
	pausedTTL   = 400 * time.Millisecond
	pausedPause = 2 * pausedTTL
	deposit     = 100
	leasesTable = "demo_leases" // not sqlock_leases: -dsn may name a database in use
)

// pausedScenario is the fifth table; it runs apart from the others, two
// processes driven step by step.
const pausedName = "paused"

type pausedStrategy struct {
	name string
	note string
	// lease or advisory
	lease bool
	// endSession: the paused holder's session ends during the pause (the
	// harness terminates it, as idle_session_timeout or a network cut
	// would), so the advisory lock moves to B.
	endSession bool
	// write is the holder's deposit: it reports whether it landed.
	write func(ctx context.Context, h *holder, balance int64) (bool, error)
}

var pausedStrategies = []*pausedStrategy{
	{name: "TTL lock, no fencing", lease: true, write: writePlain,
		note: "a lease whose holder writes without a check, as the Redis lock of the article does: A's stale balance overwrites B's deposit"},
	{name: "lease + Guard", lease: true, write: writeGuarded,
		note: "A's write runs in a transaction after lease.Guard, which finds the lease no longer A's: rolled back, A retries with a fresh read"},
	{name: "lease + fence column", lease: true, write: writeFenced,
		note: "A's UPDATE carries its token (… SET fence = $tok WHERE fence <= $tok): B's larger token is already there, 0 rows, A retries"},
	{name: "advisory lock", write: writePlain,
		note: "A's session outlives the pause, so A still holds the lock and B waits the whole pause: no lost update, but nobody works while A is frozen"},
	{name: "advisory, session ended", endSession: true, write: writePlain,
		note: "if the paused client's session ends (idle_session_timeout, a network cut; here pg_terminate_backend) B gets the lock, and A's write lands: an advisory lock has no token the data could check — use a lease with a fence where that can happen"},
}

func findPaused(name string) *pausedStrategy {
	for _, st := range pausedStrategies {
		if st.name == name {
			return st
		}
	}
	return nil
}

// holderReport is what a replica prints when it is done.
type holderReport struct {
	Wait    int64  `json:"wait_ns"`     // the first acquisition's wait
	Token   int64  `json:"token"`       // the first acquisition's fencing token (leases)
	Landed  bool   `json:"landed"`      // the first write landed
	Retried bool   `json:"retried"`     // a refused write was redone under a new acquisition
	Release string `json:"release_err"` // what the first Release said
}

type pausedRow struct {
	strategy  *pausedStrategy
	a, b      holderReport
	bWaited   bool // B was still waiting for the lock when A resumed
	lost      int  // deposits missing from the balance
	balance   int64
	elapsedMS int64
}

// runPaused runs every strategy of the paused-holder scenario.
func runPaused(ctx context.Context, exe, dsn string, p *progress, done *int, total int, each func(pausedRow)) ([]pausedRow, error) {
	var rows []pausedRow
	for _, st := range pausedStrategies {
		*done++
		p.printf("[%d/%d] %s: %s (2 processes, one frozen for %v)…", *done, total, pausedName, st.name, pausedPause)
		r, err := runPausedOne(ctx, exe, dsn, st)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", pausedName, st.name, err)
		}
		rows = append(rows, r)
		if each != nil {
			each(r)
		}
	}
	return rows, nil
}

// replicaProc is a replica process the harness drives line by line.
type replicaProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startReplica(ctx context.Context, exe, dsn, spec string) (*replicaProc, error) {
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), workerEnv+"="+spec, dsnEnv+"="+dsn)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &replicaProc{cmd, in, bufio.NewScanner(out)}, nil
}

// line reads the replica's next line.
func (r *replicaProc) line(what string) (string, error) {
	if !r.out.Scan() {
		return "", fmt.Errorf("replica ended before %s: %v", what, r.out.Err())
	}
	return r.out.Text(), nil
}

func (r *replicaProc) report() (holderReport, error) {
	var rep holderReport
	l, err := r.line("its report")
	if err == nil {
		err = json.Unmarshal([]byte(l), &rep)
	}
	return rep, err
}

func (r *replicaProc) kill() {
	if r != nil && r.cmd.ProcessState == nil {
		r.cmd.Process.Kill() // also ends a stopped process
		r.cmd.Wait()
	}
}

func runPausedOne(ctx context.Context, exe, dsn string, st *pausedStrategy) (pausedRow, error) {
	start := time.Now()
	row := pausedRow{strategy: st}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return row, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS account, demo_leases;
		CREATE TABLE account (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL DEFAULT 0);
		INSERT INTO account (id, balance) VALUES (1, 0)`); err != nil {
		return row, fmt.Errorf("setup: %w", err)
	}
	if err := migrateLeases(ctx, dsn); err != nil {
		return row, fmt.Errorf("setup: %w", err)
	}
	var a, b *replicaProc
	defer func() { a.kill(); b.kill() }()
	if a, err = startReplica(ctx, exe, dsn, pausedName+"/"+st.name+"/A"); err != nil {
		return row, err
	}
	if b, err = startReplica(ctx, exe, dsn, pausedName+"/"+st.name+"/B"); err != nil {
		return row, err
	}
	for _, r := range []*replicaProc{a, b} {
		if l, err := r.line("ready"); err != nil || l != "ready" {
			return row, fmt.Errorf("replica did not start: %q %v", l, err)
		}
	}
	// A takes the lock and reads; it then waits for "write" on stdin.
	io.WriteString(a.in, "take\n")
	if l, err := a.line("holding"); err != nil || l != "holding" {
		return row, fmt.Errorf("replica A: %q %v", l, err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return row, err
	}
	stopped := time.Now()
	if err := waitStopped(ctx, a.cmd.Process.Pid); err != nil {
		return row, err
	}
	if st.endSession {
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND database = `+thisDatabase); err != nil {
			return row, err
		}
	}
	io.WriteString(a.in, "write\n") // read by A when it resumes
	io.WriteString(b.in, "take\nwrite\n")
	takeover := st.lease || st.endSession
	if takeover { // the lock moves to B, who deposits before A resumes
		if _, err := b.line("holding"); err != nil {
			return row, fmt.Errorf("replica B: %w", err)
		}
		if row.b, err = b.report(); err != nil {
			return row, fmt.Errorf("replica B: %w", err)
		}
	}
	time.Sleep(time.Until(stopped.Add(pausedPause))) // the pause lasts 2 × TTL at least
	if !takeover {                                   // B must still be waiting for A's lock
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = `+thisDatabase).Scan(&waiting); err != nil {
			return row, err
		}
		row.bWaited = waiting == 1
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return row, err
	}
	if row.a, err = a.report(); err != nil {
		return row, fmt.Errorf("replica A: %w", err)
	}
	if !takeover {
		if _, err := b.line("holding"); err != nil {
			return row, fmt.Errorf("replica B: %w", err)
		}
		if row.b, err = b.report(); err != nil {
			return row, fmt.Errorf("replica B: %w", err)
		}
	}
	for _, r := range []*replicaProc{a, b} {
		r.in.Close()
		if err := r.cmd.Wait(); err != nil {
			return row, err
		}
	}
	if err := conn.QueryRow(ctx, "SELECT balance FROM account WHERE id = 1").Scan(&row.balance); err != nil {
		return row, err
	}
	row.lost = int((2*deposit - row.balance) / deposit)
	row.elapsedMS = time.Since(start).Milliseconds()
	return row, nil
}

// waitStopped returns once every thread of process pid is stopped. kill
// returns before a multi-threaded process has stopped everywhere; a thread
// still running could otherwise take the "write" sent next and write before
// the pause.
func waitStopped(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if stopped, err := allStopped(pid); err != nil || stopped {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("process %d did not stop: %w", pid, ctx.Err())
		case <-tick.C:
		}
	}
}

// allStopped reads the state of each of pid's threads from /proc.
func allStopped(pid int) (bool, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false, err
	}
	for _, t := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			return false, err
		}
		// The state follows the command name, which is in parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
			return false, nil
		}
	}
	return true, nil
}

// thisDatabase limits a look at pg_locks, which shows the whole cluster's,
// to the demo's database.
const thisDatabase = "(SELECT oid FROM pg_database WHERE datname = current_database())"

// migrateLeases creates the leases table, as a service's migration would.
func migrateLeases(ctx context.Context, dsn string) error {
	p, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer p.Close()
	return lease.Migrate(ctx, p, lease.WithTable(leasesTable))
}

// holder is a paused-holder replica's state.
type holder struct {
	pool   *pgxpool.Pool
	leases *lease.Manager
	locker *advisory.Locker
	st     *pausedStrategy
	lk     sqlock.Lock
}

// take acquires the account's lock through the backend-neutral interface.
func (h *holder) take(ctx context.Context) (time.Duration, error) {
	var locks sqlock.Acquirer
	if h.st.lease {
		locks = h.leases.Acquirer(pausedTTL)
	} else {
		locks = h.locker.Acquirer()
	}
	start := time.Now()
	lk, err := locks.Acquire(ctx, "account:1")
	h.lk = lk
	return time.Since(start), err
}

func (h *holder) read(ctx context.Context) (int64, error) {
	var balance int64
	err := h.pool.QueryRow(ctx, "SELECT balance FROM account WHERE id = 1").Scan(&balance)
	return balance, err
}

// writePlain is the write without any check: what a lock alone gives.
func writePlain(ctx context.Context, h *holder, balance int64) (bool, error) {
	_, err := h.pool.Exec(ctx, "UPDATE account SET balance = $1 WHERE id = 1", balance+deposit)
	return err == nil, err
}

// writeGuarded writes in a transaction that lease.Guard ties to the lease.
func writeGuarded(ctx context.Context, h *holder, balance int64) (bool, error) {
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	if err := h.lk.(*lease.Lease).Guard(ctx, tx); err != nil {
		if errors.Is(err, sqlock.ErrLost) {
			return false, nil
		}
		return false, err
	}
	if _, err := tx.Exec(ctx, "UPDATE account SET balance = $1 WHERE id = 1", balance+deposit); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// writeFenced checks the lease's token against the row's fence in the
// UPDATE itself.
func writeFenced(ctx context.Context, h *holder, balance int64) (bool, error) {
	tok := h.lk.(sqlock.Fenced).Token()
	tag, err := h.pool.Exec(ctx, "UPDATE account SET balance = $1, fence = $2 WHERE id = 1 AND fence <= $2",
		balance+deposit, tok)
	return err == nil && tag.RowsAffected() == 1, err
}

// pausedWorker is a replica of the paused-holder scenario: "take" acquires
// and reads, "write" deposits (redoing a refused deposit under a new
// acquisition, as a service retries), then it prints its report.
func pausedWorker(ctx context.Context, cfg workerConfig, in io.Reader, out io.Writer) error {
	st := findPaused(cfg.Strategy)
	if st == nil {
		return fmt.Errorf("unknown strategy %q", cfg.Strategy)
	}
	pool, err := pgxpool.New(ctx, cfg.DSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	h := &holder{pool: pool, st: st,
		leases: lease.New(pool, lease.WithTable(leasesTable), lease.WithTimeout(30*time.Second)),
		locker: advisory.NewPool(pool, advisory.WithTimeout(30*time.Second), advisory.WithKeepalive(100*time.Millisecond),
			advisory.WithKeyNames())}
	if err := warm(ctx, pool, 2); err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")
	cmds := bufio.NewScanner(in)
	next := func(want string) error {
		if !cmds.Scan() || cmds.Text() != want {
			return fmt.Errorf("waiting for %q: %q %v", want, cmds.Text(), cmds.Err())
		}
		return nil
	}
	var rep holderReport
	if err := next("take"); err != nil {
		return err
	}
	wait, err := h.take(ctx)
	if err != nil {
		return err
	}
	rep.Wait = int64(wait)
	if f, ok := h.lk.(sqlock.Fenced); ok {
		rep.Token = f.Token()
	}
	balance, err := h.read(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "holding")
	if err := next("write"); err != nil { // A is frozen here
		return err
	}
	if rep.Landed, err = st.write(ctx, h, balance); err != nil {
		return err
	}
	if rerr := h.lk.Release(ctx); rerr != nil {
		rep.Release = rerr.Error()
	}
	if !rep.Landed { // refused: take the lock again, read again, write again
		rep.Retried = true
		if _, err := h.take(ctx); err != nil {
			return err
		}
		if balance, err = h.read(ctx); err != nil {
			return err
		}
		landed, err := st.write(ctx, h, balance)
		if err != nil || !landed {
			return fmt.Errorf("the retried deposit did not land: %v", err)
		}
		if err := h.lk.Release(ctx); err != nil {
			return err
		}
	}
	return json.NewEncoder(out).Encode(rep)
}

func printPaused(w io.Writer, rows []pausedRow) {
	fmt.Fprintf(w, "\n5. paused holder — A holds the lock, reads the balance, is frozen (SIGSTOP) for %v (2 × TTL %v);\n"+
		"   B asks for the lock and deposits %d; A resumes and writes the deposit it computed before the pause\n",
		pausedPause, pausedTTL, deposit)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "strategy\tB got the lock\tA's late write\tbalance\tlost updates\t\n")
	for _, r := range rows {
		got := "after " + dur(time.Duration(r.b.Wait)) + ", while A was frozen"
		if !r.strategy.lease && !r.strategy.endSession {
			got = "after " + dur(time.Duration(r.b.Wait)) + ", when A resumed"
		}
		late := "landed (A still held the lock)"
		switch {
		case !r.a.Landed:
			late = "refused, redone"
		case r.strategy.lease || r.strategy.endSession:
			late = "landed over B's"
		}
		lost := strconv.Itoa(r.lost)
		if r.lost > 0 {
			lost += " !!"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t\n", r.strategy.name, got, late, r.balance, lost)
	}
	tw.Flush()
	for _, r := range rows {
		fmt.Fprintf(w, "  %s: %s\n", r.strategy.name, wrapNote(r.strategy.note))
	}
	fmt.Fprintf(w, "  (the lease's own test, lease.TestPausedHolderIsFencedOut, does this through PgBouncer too)\n")
}

// wrapNote keeps a note's lines short enough for a terminal.
func wrapNote(s string) string {
	var b strings.Builder
	col := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if col+1+len(word) > 88 {
				b.WriteString("\n      ")
				col = 0
			} else {
				b.WriteByte(' ')
				col++
			}
		}
		b.WriteString(word)
		col += len(word)
	}
	return b.String()
}
