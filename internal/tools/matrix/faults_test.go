package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/txlock"
)

// The root module's faults, attached to its load rows by mechanism
// (pgFaults) and, for a form no load row has, on rows of their own
// (faultRows). Each injects its fault with the levers the packages' own
// tests use: pgtest's proxy (stall, cut), its private clusters (killed and
// started again), its replica sets (failover to a synchronous or an
// asynchronous standby) and PgBouncer, and for a paused holder a real OS
// process — this test binary run again as a child holding a lease —
// stopped with SIGSTOP.
//
// A holder's pause, cut or partition is placed between its read and its
// write by construction (matrix.PauseBeforeWrite), or before its guarded
// transaction, so that each verdict follows from what the mechanism does,
// not from the scheduler. The stale write itself is
// not one of the run's operations: refused by a fence, it is what the
// mechanism promises (and is noted); landed, it shows as the workload's
// anomaly.
func init() {
	if spec := os.Getenv(holderEnv); spec != "" {
		// This binary was started as the paused holder of a fault.
		os.Exit(pausedHolder(spec))
	}
	for _, m := range []string{"versioned+retry", "gormplugin+retry", "CAS", "DoOptimistic", "by hand: UPDATE … WHERE version",
		"by hand: pg_advisory_xact_lock", "idem"} {
		pgFaults[m] = append(pgFaults[m], storeKilled())
	}
	pgFaults["versioned+retry"] = append(pgFaults["versioned+retry"], behindPgBouncer(matrix.Safe))
	pgFaults["txlock"] = append(pgFaults["txlock"], storeKilled(), txlockCut(), behindPgBouncer(matrix.Safe))
	pgFaults["advisory"] = append(pgFaults["advisory"], advisoryCut(), behindPgBouncer(matrix.Unavailable))
	pgFaults["lease"] = append(pgFaults["lease"], pausedPastTTL(true), leasePartitioned(),
		leaseFailover(true), leaseFailover(false))
	pgFaults["lease"] = append(pgFaults["lease"], behindPgBouncer(matrix.Safe))
	pgFaults["lease+Guard"] = append(pgFaults["lease+Guard"], pausedFault(holderSpec{Guard: true}), behindPgBouncer(matrix.Safe))
	faultRows = append(faultRows, matrix.Row{
		Mechanism: "lease (unfenced)", Group: "lock", Open: leaseRow(unfencedWrite),
		Faults: []matrix.Fault{pausedPastTTL(false)},
	})
}

// sizes are a fault's contenders and operations per contender in mode m:
// a few in quick (make test), enough to measure in full; rounds is how
// many times a fault that is made once per holder is made.
func sizes(m matrix.Mode) (contenders, ops, rounds int) {
	if m == matrix.Full {
		return 8, 50, 3
	}
	return 2, 3, 1
}

// holderTTL is a paused or partitioned holder's lease TTL, as lease's
// own pause test picks it — long beside the machine's round trip, which
// a Manager refuses a TTL shorter than 8 of — but at most 3 s, so that
// the row's next holder, whose wait is bounded by lease.DefaultTimeout
// (5 s), outwaits it.
func holderTTL(db *pgtest.DB) time.Duration {
	return min(max(500*time.Millisecond, 50*db.Latency()), 3*time.Second)
}

// flushIdle closes db's idle connections, which a fault may have broken
// (a killed server, a failover), keeping room for n afterwards: the next
// statement opens a connection to the server that now takes writes.
func flushIdle(db *sql.DB, n int) {
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(n)
}

// idleConns is what the harness keeps idle on a cell of c contenders.
func idleConns(c *matrix.Cell) int { return 2*c.Contenders + 4 }

// stepped is an operation that step started and holds between its read
// and its write; wait lets the write go and returns the outcome.
type stepped struct {
	read, resume chan struct{}
	done         chan struct{}
	r            matrix.Result
	err          error
}

// step runs op — an operation whose Querier pauses before its write with
// the pause it is given — in a goroutine, and returns once it has read,
// or an error if it ended without a write to pause at (a refusal, an
// error).
func step(ctx context.Context, op func(ctx context.Context, pause func(context.Context)) (matrix.Result, error)) (*stepped, error) {
	s := &stepped{read: make(chan struct{}), resume: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.r, s.err = op(ctx, func(ctx context.Context) {
			close(s.read)
			select {
			case <-s.resume:
			case <-ctx.Done():
			}
		})
	}()
	select {
	case <-s.read:
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("the holder ended before its write (%v, %v)", s.r, s.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("the holder never read: %w", ctx.Err())
	}
}

func (s *stepped) wait(ctx context.Context) (matrix.Result, error) {
	close(s.resume)
	select {
	case <-s.done:
		return s.r, s.err
	case <-ctx.Done():
		return 0, fmt.Errorf("the holder's write never ended: %w", ctx.Err())
	}
}

// via is c reached through dsn instead (a proxy in front of the same
// database): the same State, contenders and round-trip counter.
func via(c *matrix.Cell, dsn string) *matrix.Cell {
	v := *c
	v.DSN = dsn
	return &v
}

// staleWrite records how a stale holder's write, sent after the next
// holder's operation, ended: refused by the fence or the guard (noted),
// landed (noted; the workload's check counts the anomaly it made), or
// neither, which means the fault was not made.
func staleWrite(f *matrix.FaultRun, who string, r matrix.Result, err error) error {
	switch {
	case errors.Is(err, matrix.ErrFenced):
		f.Note("%s: its write was refused by the fence (ErrFenced)", who)
	case errors.Is(err, lease.ErrLost):
		f.Note("%s: its guarded transaction was refused (ErrLost)", who)
	case err == nil && r == matrix.Done:
		f.Note("%s: its write landed", who)
	default:
		return fmt.Errorf("%s: the stale write neither landed nor was fenced: %v, %v", who, r, err)
	}
	return nil
}

// --- the paused holder: a child process ---

// holderEnv carries a paused holder's spec (JSON) to the child process.
const holderEnv = "SQLOCK_MATRIX_PAUSED_HOLDER"

// holderSpec is what the paused holder does: take Lease on DSN for TTL
// and apply one operation on Key of the state, pausing between its read
// and its write, its write fenced by the lease's token or not; or, Guard,
// pause first and then apply it in a transaction the lease guards
// (BeginGuarded), as the lease+Guard row does.
type holderSpec struct {
	DSN, Lease, Key       string
	TTL                   time.Duration
	Workload              matrix.Workload
	Schema, Items, Events string
	Fenced, Guard         bool
}

// pausedHolder is the child process: it says "ACQUIRED <token>", reads,
// says "PAUSE" and waits for a line on stdin (its parent stops it with
// SIGSTOP meanwhile, and continues it before sending the line); then it
// writes what it read, as a holder that slept through its TTL would, and
// says "RESULT fenced|lost|done|refused|error: …".
func pausedHolder(spec string) int {
	var h holderSpec
	if err := json.Unmarshal([]byte(spec), &h); err != nil {
		fmt.Println("spec:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgx.ParseConfig(h.DSN)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	db := txlock.OpenDB(*cfg) // BeginGuarded's handle
	defer db.Close()
	l, err := lease.New(db, lease.WithTimeout(time.Minute)).Acquire(ctx, h.Lease, h.TTL)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer l.Release(ctx)
	fmt.Printf("ACQUIRED %d\n", l.Token())
	in := bufio.NewReader(os.Stdin)
	pause := func(context.Context) {
		fmt.Println("PAUSE")
		in.ReadString('\n')
		// Its connections may be to a server that is gone (a failover):
		// the write goes where a pool's next connection goes.
		flushIdle(db, 2)
	}
	s := &matrix.State{Workload: h.Workload, Schema: h.Schema, Items: h.Items, Events: h.Events}
	var r matrix.Result
	if h.Guard {
		pause(ctx)
		err = func() error {
			tx, err := l.BeginGuarded(ctx, db, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if r, err = s.Apply(ctx, tx, h.Key, 0); err != nil {
				return err
			}
			return tx.Commit()
		}()
	} else {
		fence := int64(0)
		if h.Fenced {
			fence = l.Token()
		}
		r, err = s.Apply(ctx, matrix.PauseBeforeWrite(db, pause), h.Key, fence)
	}
	switch {
	case errors.Is(err, matrix.ErrFenced):
		fmt.Println("RESULT fenced")
	case errors.Is(err, lease.ErrLost):
		fmt.Println("RESULT lost")
	case err != nil:
		fmt.Println("RESULT error:", strings.ReplaceAll(err.Error(), "\n", " "))
	case r == matrix.Refused:
		fmt.Println("RESULT refused")
	default:
		fmt.Println("RESULT done")
	}
	return 0
}

// holderProc is the parent's side of a paused holder.
type holderProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startHolder starts the paused holder h; it is killed when t ends (or
// ctx does).
func startHolder(ctx context.Context, t testing.TB, h holderSpec) (*holderProc, error) {
	spec, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	p := &holderProc{cmd: cmd}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	p.out = bufio.NewScanner(stdout)
	return p, nil
}

// expect returns what follows prefix on the holder's next line, or an
// error once it has exited without saying it.
func (p *holderProc) expect(prefix string) (string, error) {
	if !p.out.Scan() {
		return "", fmt.Errorf("the paused holder exited before %q (%v)", prefix, p.out.Err())
	}
	rest, ok := strings.CutPrefix(p.out.Text(), prefix)
	if !ok {
		return "", fmt.Errorf("the paused holder said %q, want %q", p.out.Text(), prefix)
	}
	return rest, nil
}

// pausedRound is one paused holder (spec) on key of c: it takes the
// lease the row's actors take for key, reaches its pause (after its read,
// or before its guarded transaction), and is stopped (SIGSTOP);
// during the pause meanwhile runs (a failover, say) and then next's actor
// — the row's next holder — does the operation on key, which it can only
// do once the paused holder's lease has expired on the server. Then the
// holder is continued and writes: after the next holder's write, by
// construction.
func pausedRound(ctx context.Context, f *matrix.FaultRun, c *matrix.Cell, spec holderSpec, key string,
	meanwhile func() error, next func() (matrix.Actor, error)) error {
	spec.Lease, spec.Key = c.State.Schema+":"+key, key
	spec.Workload, spec.Schema, spec.Items, spec.Events = c.State.Workload, c.State.Schema, c.State.Items, c.State.Events
	h, err := startHolder(ctx, f.T, spec)
	if err != nil {
		return err
	}
	tok, err := h.expect("ACQUIRED ")
	if err != nil {
		return err
	}
	if _, err := h.expect("PAUSE"); err != nil {
		return err
	}
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	if meanwhile != nil {
		if err := meanwhile(); err != nil {
			return err
		}
	}
	a, err := next()
	if err != nil {
		return err
	}
	f.Do(ctx, a, key) // recorded: an error here is the row's unavailability
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	if _, err := io.WriteString(h.stdin, "write\n"); err != nil {
		return err
	}
	res, err := h.expect("RESULT ")
	if err != nil {
		return err
	}
	who := "the paused holder (token " + tok + ")"
	switch res {
	case "fenced":
		return staleWrite(f, who, 0, matrix.ErrFenced)
	case "lost":
		return staleWrite(f, who, 0, lease.ErrLost)
	case "done":
		return staleWrite(f, who, matrix.Done, nil)
	}
	return fmt.Errorf("%s: %s", who, res)
}

// pausedPastTTL: the holder, a real OS process, is stopped with SIGSTOP
// between its read and its write until the next holder has taken the
// lease (which the server gives only once the paused one's TTL has run
// out) and written; continued, it writes what it read. Fenced by its
// token, the write is refused (ErrFenced): safe. Unfenced it lands on top
// of the next holder's: a double charge, by construction. (lease+Guard's
// form, pausedFault with Guard: paused before its guarded transaction, the
// holder's BEGIN is refused with ErrLost.)
func pausedPastTTL(fenced bool) matrix.Fault {
	return pausedFault(holderSpec{Fenced: fenced})
}

// pausedFault is pausedPastTTL for the holder spec describes (fenced,
// unfenced or guarded).
func pausedFault(spec holderSpec) matrix.Fault {
	name, expect := "holder paused past TTL (fenced)", matrix.Safe
	if !spec.Fenced && !spec.Guard {
		name, expect = "holder paused past TTL (unfenced)", matrix.Unsafe
	}
	return matrix.Fault{Name: name, Expect: expect, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		_, _, rounds := sizes(f.Mode)
		db := pgtest.New(f.T)
		c, err := f.NewCell(ctx, db.DSN, 1, matrix.HotKey, rounds)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c) // migrates the leases' table
		if err != nil {
			return err
		}
		spec.DSN, spec.TTL = db.DSN, holderTTL(db)
		for i := range rounds {
			next := func() (matrix.Actor, error) { return actors[0], nil }
			if err := pausedRound(ctx, f, c, spec, c.State.Key(i), nil, next); err != nil {
				return err
			}
		}
		where := "between its read and its write"
		if spec.Guard {
			// Inside the guarded transaction the lease cannot be taken
			// over: a pause there makes the next holder wait, no more.
			where = "before its guarded transaction"
		}
		f.Note("the holder is a child process stopped with SIGSTOP %s (lease TTL %v) until the next holder has written; %d round(s)", where, spec.TTL, rounds)
		return nil
	}}
}

// leaseFailover: the same paused holder on a primary with a streaming
// standby; during its pause the primary is stopped hard (SIGQUIT) and the
// standby promoted, and the next holder takes the lease on the promoted
// standby. Synchronous, the standby had the paused holder's grant and its
// token before Acquire returned, so the next holder waits out its TTL and
// gets a greater token, and the stale write is fenced: safe.
// Asynchronous, the grant may not have reached the standby: nothing
// promises the next holder a greater token, so the verdict is measured,
// not asserted.
func leaseFailover(synchronous bool) matrix.Fault {
	name, expect := "failover sync", matrix.Safe
	if !synchronous {
		name, expect = "failover async", ""
	}
	return matrix.Fault{Name: name, Expect: expect, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		contenders, ops, _ := sizes(f.Mode)
		r := pgtest.NewReplicaSet(f.T, pgtest.ReplicaOptions{Synchronous: synchronous})
		db := r.NewDB(f.T)
		c, err := f.NewCell(ctx, db.DSN, contenders, matrix.HotKey, ops+1)
		if err != nil {
			return err
		}
		if err := lease.Migrate(ctx, c.DB); err != nil {
			return err
		}
		if err := r.WaitReplay(ctx); err != nil { // the state and the table are on the standby
			return err
		}
		var lag int64
		failover := func() error {
			var err error
			if lag, err = r.Lag(ctx); err != nil {
				return err
			}
			if err := r.Failover(ctx); err != nil {
				return err
			}
			flushIdle(c.DB, idleConns(c))
			return nil
		}
		var actors []matrix.Actor
		next := func() (matrix.Actor, error) { // opened on the promoted standby
			var err error
			actors, err = f.Actors(ctx, c)
			if err != nil {
				return nil, err
			}
			return actors[0], nil
		}
		ttl := holderTTL(db)
		spec := holderSpec{DSN: db.DSN, TTL: ttl, Fenced: true}
		if err := pausedRound(ctx, f, c, spec, c.State.Key(ops), failover, next); err != nil {
			return err
		}
		f.Load(ctx, c, actors, ops) // the load goes on, on the promoted standby
		f.Note("the paused holder (lease TTL %v) read on the primary; the primary was stopped hard (SIGQUIT) with the standby %d bytes behind and the standby promoted; the next holder took the lease there", ttl, lag)
		if !synchronous {
			f.Note("not asserted: asynchronous replication loses with the primary what the standby had not received; a grant younger than the lag is lost, and then the next holder's token need not be greater; here the primary died after the holder's pause began, by when the standby usually has its grant (lag above); lease's TestFailoverWithAsynchronousReplicationMeasuresTheWindow measures the window under load")
		}
		return nil
	}}
}

// leasePartitioned: the holder reaches its store through pgtest's proxy,
// which stalls between the holder's read and its write. Its renewals do
// not arrive, the lease expires on the server, and the next holder (on a
// direct connection) takes it and writes. The partition heals: the
// holder's write, sent as if nothing happened, arrives after the next
// holder's and is refused by the fence.
func leasePartitioned() matrix.Fault {
	return matrix.Fault{Name: "partitioned by proxy", Expect: matrix.Safe, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		_, _, rounds := sizes(f.Mode)
		db := pgtest.New(f.T)
		c, err := f.NewCell(ctx, db.DSN, 1, matrix.HotKey, rounds)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c) // the next holder, direct
		if err != nil {
			return err
		}
		p := pgtest.StartProxy(f.T, db.DSN)
		hdb, err := openTx(via(c, p.DSN))
		if err != nil {
			return err
		}
		defer hdb.Close()
		m := lease.New(hdb)
		ttl := holderTTL(db)
		lost := 0
		for i := range rounds {
			key := c.State.Key(i)
			l, err := m.Acquire(ctx, c.State.Schema+":"+key, ttl)
			if err != nil {
				return err
			}
			s, err := step(ctx, func(ctx context.Context, pause func(context.Context)) (matrix.Result, error) {
				return c.State.Apply(ctx, matrix.PauseBeforeWrite(hdb, pause), key, l.Token())
			})
			if err != nil {
				return err
			}
			p.Stall()
			f.Do(ctx, actors[0], key)
			select {
			case <-l.Lost():
				lost++
			default:
			}
			p.Resume()
			r, err := s.wait(ctx)
			l.Release(ctx) // not held any more: its error says so
			if err := staleWrite(f, fmt.Sprintf("the partitioned holder (token %d)", l.Token()), r, err); err != nil {
				return err
			}
		}
		f.Note("the proxy stalled between the holder's read and its write until the next holder (direct) had written (lease TTL %v); the holder's Lost had fired in %d of %d rounds, and it wrote regardless", ttl, lost, rounds)
		return nil
	}}
}

// --- the store killed ---

// storeKilled: the load runs on a private cluster, which is stopped hard
// (SIGQUIT, PostgreSQL's immediate shutdown: a crash) mid-load; an
// operation of each contender runs while it is down, then it is started
// again (WAL replayed) and the load goes on. The rows it is attached to
// keep all they decide in the transaction of the write (a version, a
// transaction-scoped lock, idem's claim), which the crash commits or rolls
// back whole, so nothing is lost or doubled: the operations fail while
// the store is down (unavailable), and no anomaly. (A session lock or a
// lease outlives its holder's failed operation, so theirs is another
// fault.)
func storeKilled() matrix.Fault {
	return matrix.Fault{Name: "store killed", Expect: matrix.Unavailable, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		contenders, ops, _ := sizes(f.Mode)
		cl, err := killable()
		if err != nil {
			return err
		}
		c, err := f.NewCell(ctx, cl.NewDB(f.T).DSN, contenders, matrix.HotKey, 2*ops)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c)
		if err != nil {
			return err
		}
		var ok atomic.Int64
		counted := make([]matrix.Actor, len(actors))
		for i, a := range actors {
			counted[i] = matrix.ActorFunc(func(ctx context.Context, key string) (matrix.Result, error) {
				r, err := a.Op(ctx, key)
				if err == nil {
					ok.Add(1)
				}
				return r, err
			})
		}
		// The kill lands halfway through the load; the load stops there
		// (its operations in flight fail with the store), so that what
		// runs while the store is down is one operation per contender.
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		loaded := make(chan struct{})
		go func() {
			defer close(loaded)
			f.Load(lctx, c, counted, ops)
		}()
		half := int64(contenders * ops / 2)
		if err := waitFor(ctx, loaded, func() bool { return ok.Load() >= half }); err != nil {
			return err
		}
		if err := cl.Kill(); err != nil {
			return err
		}
		stop()
		<-loaded
		before := ok.Load()
		for i, a := range actors { // refused by a store that is down
			f.Do(ctx, a, matrix.KeyOf(c, i, ops))
		}
		if err := cl.Start(ctx); err != nil {
			return err
		}
		flushIdle(c.DB, idleConns(c))
		f.Load(ctx, c, actors, ops)
		f.Note("killed (SIGQUIT) halfway through the load (%d of %d operations had succeeded), an operation of each of the %d contenders while it was down, started again, the load run again",
			before, contenders*ops, contenders)
		return nil
	}}
}

// killable is the private cluster the store-killed faults kill, started
// on first use and shared by them (one each would cost an initdb each),
// each fault on a database of its own. Its watchdog stops it and removes
// its directory when the test binary exits.
var killable = sync.OnceValues(func() (*pgtest.Cluster, error) {
	return pgtest.StartCluster(context.Background(), pgtest.Options{})
})

// waitFor waits until cond holds, done is closed or ctx ends (an error).
func waitFor(ctx context.Context, done <-chan struct{}, cond func() bool) error {
	for !cond() {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("waiting for the load: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// --- the holder's connection cut ---

// cutRound is one holder on key, reaching the lock through proxy (its
// operation op), stopped between its read and its write while the proxy
// cuts every connection through it; the next holder (the row's actor,
// direct) does the operation on key; then the holder writes. The holder's
// operation is recorded as one of the run's.
func cutRound(ctx context.Context, f *matrix.FaultRun, p *pgtest.Proxy, next matrix.Actor, key string,
	op func(ctx context.Context, pause func(context.Context)) (matrix.Result, error)) error {
	var s *stepped
	held := matrix.ActorFunc(func(ctx context.Context, _ string) (matrix.Result, error) {
		return s.wait(ctx)
	})
	s, err := step(ctx, op)
	if err != nil {
		return err
	}
	p.Cut()
	f.Do(ctx, next, key)
	f.Do(ctx, held, key)
	return nil
}

// txlockCut: the holder's transaction — the lock and the work on one
// connection — is cut by the proxy between its read and its write. The
// server ends the session, which rolls the transaction back and releases
// the lock; the next holder gets it; the holder's write fails on the cut
// connection and none of its work commits. Unavailable (its operation
// fails), never unsafe: structurally, since the lock and the writes share
// the transaction.
func txlockCut() matrix.Fault {
	return matrix.Fault{Name: "holder's connection cut", Expect: matrix.Unavailable, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		_, _, rounds := sizes(f.Mode)
		db := pgtest.New(f.T)
		c, err := f.NewCell(ctx, db.DSN, 1, matrix.HotKey, rounds)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c)
		if err != nil {
			return err
		}
		p := pgtest.StartProxy(f.T, db.DSN)
		hdb, err := openTx(via(c, p.DSN))
		if err != nil {
			return err
		}
		defer hdb.Close()
		for i := range rounds {
			key := c.State.Key(i)
			err := cutRound(ctx, f, p, actors[0], key, func(ctx context.Context, pause func(context.Context)) (r matrix.Result, err error) {
				err = txlock.Do(ctx, hdb, lockKey(c, key), func(ctx context.Context, tx *sql.Tx) (err error) {
					r, err = c.State.Apply(ctx, matrix.PauseBeforeWrite(tx, pause), key, 0)
					return err
				})
				return r, err
			})
			if err != nil {
				return err
			}
		}
		f.Note("the proxy cut the holder's connection between its read and its write, %d round(s); the next holder was direct", rounds)
		return nil
	}}
}

// advisoryCut: the holder's lock session, through the proxy, is cut
// between its read and its write, which go (as the row's do) through the
// pool, here direct. The lock ends with the session and the next holder
// gets it at once. The holder is told (Do's context ends, ErrLost) by its
// next keepalive, within 1¼ intervals; whether its write went first is a
// race with that timer, and an advisory lock has no token that would
// refuse it. So the verdict is measured, not asserted.
func advisoryCut() matrix.Fault {
	return matrix.Fault{Name: "holder's connection cut", Run: func(ctx context.Context, f *matrix.FaultRun) error {
		_, _, rounds := sizes(f.Mode)
		db := pgtest.New(f.T)
		c, err := f.NewCell(ctx, db.DSN, 1, matrix.HotKey, rounds)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c)
		if err != nil {
			return err
		}
		p := pgtest.StartProxy(f.T, db.DSN)
		ldb, err := matrix.OpenSQL(p.DSN, c.RoundTrips)
		if err != nil {
			return err
		}
		defer ldb.Close()
		l := advisory.New(ldb)
		for i := range rounds {
			key := c.State.Key(i)
			err := cutRound(ctx, f, p, actors[0], key, func(ctx context.Context, pause func(context.Context)) (r matrix.Result, err error) {
				err = l.Do(ctx, lockKey(c, key), func(ctx context.Context) (err error) {
					r, err = c.State.Apply(ctx, matrix.PauseBeforeWrite(c.DB, pause), key, 0)
					return err
				})
				return r, err
			})
			if err != nil {
				return err
			}
		}
		f.Note("not asserted: the proxy cut the lock's session between the holder's read and its write (%d round(s)); the lock ended with it and the next holder took it; the holder's write, on a pool connection, lands unless its keepalive (every %v) ended Do's context first: an advisory lock has no token to refuse it", rounds, advisory.DefaultKeepalive)
		return nil
	}}
}

// --- PgBouncer in transaction mode ---

// behindPgBouncer runs the row's load through PgBouncer in transaction
// mode (default_query_exec_mode=exec: PgBouncer 1.18 has no prepared
// statements). A transaction-scoped mechanism works there, and so does a
// lease, whose every statement stands alone (its waiters poll): safe. A
// session lock cannot, and advisory refuses every call with an error
// matching sqlock.ErrUnsupported (unavailable) rather than lock nothing.
func behindPgBouncer(expect matrix.Verdict) matrix.Fault {
	return matrix.Fault{Name: "PgBouncer (transaction mode)", Expect: expect, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		contenders, ops, _ := sizes(f.Mode)
		db := pgtest.New(f.T)
		dsn := pgtest.StartPgBouncer(f.T, db, "transaction") + "&default_query_exec_mode=exec"
		c, err := f.NewCell(ctx, dsn, contenders, matrix.HotKey, ops)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c)
		if err != nil {
			return err
		}
		f.Load(ctx, c, actors, ops)
		f.Note("%d contenders × %d operations through PgBouncer in transaction mode", contenders, ops)
		return nil
	}}
}
