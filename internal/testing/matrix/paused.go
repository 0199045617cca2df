package matrix

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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sqlock/sqlock"
)

// The fault "holder paused past TTL", the same on every lock row: holder
// A is another OS process (the test binary run again, which calls
// ServePausedHolder). It takes the lock of a cell's item with a short TTL,
// reads the item and, before it writes, is stopped with SIGSTOP. B — the
// row's own operation, run in this process — acquires once A's lock has
// expired and writes; A is continued and writes what it read. Fenced, A's
// token is older than B's and PostgreSQL refuses the write (safe);
// unfenced, the item is charged, booked or sold twice (unsafe). A does not
// check its lock between its read and its write, which a check could not
// make safe anyway: a pause after the check is the same fault. Guarded, A
// is stopped before a transaction its lock guards (a lease's
// BeginGuarded), which refuses to begin once the lock is lost.

// pausedHolderEnv carries a paused holder's spec (JSON) to its process.
const pausedHolderEnv = "SQLOCK_MATRIX_PAUSED_HOLDER"

// HolderSpec is what a paused holder's process needs: the lock (its
// TTL, whether its token fences the write or a transaction it guards
// holds the write), the row's own part (Backend: where its servers are,
// for the row's open function) and the cell's workload state, which
// PausedHolder fills in.
type HolderSpec struct {
	TTL    time.Duration
	Fenced bool
	// Guarded: A is stopped before its operation, which it then runs in
	// a transaction its lock guards; the lock must be a TxGuard.
	Guarded bool
	Backend json.RawMessage

	Name, Key             string
	DSN                   string
	Workload              Workload
	Schema, Items, Events string
}

// TxGuard is a lock that can guard a transaction: BeginGuarded begins one
// on db that commits only while the lock is held (lease.Lease does).
type TxGuard interface {
	BeginGuarded(ctx context.Context, db interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	}, opts *sql.TxOptions) (*sql.Tx, error)
}

// PausedHolder runs the fault on cell c's first item with holder A's lock
// as spec describes, b being B's operation, and notes what happened; an
// error means the fault could not be made.
func (f *FaultRun) PausedHolder(ctx context.Context, c *Cell, spec HolderSpec, b Actor) error {
	return f.PausedRound(ctx, c, c.State.Key(0), spec, func(context.Context) (Actor, error) { return b, nil })
}

// PausedRound is PausedHolder on c's item key, with during run while A is
// stopped: it makes whatever else the fault is made of (a failover, say)
// and returns B's operation, opened afterwards. A row runs several rounds
// on items of their own.
func (f *FaultRun) PausedRound(ctx context.Context, c *Cell, key string, spec HolderSpec, during func(context.Context) (Actor, error)) error {
	spec.Name, spec.Key, spec.DSN, spec.Workload = LockName(c, key), key, c.DSN, c.Workload
	spec.Schema, spec.Items, spec.Events = c.State.Schema, c.State.Items, c.State.Events
	env, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMatrix$", "-test.count=1")
	cmd.Env = append(os.Environ(), pausedHolderEnv+"="+string(env))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	defer cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies only once continued
	lines := bufio.NewScanner(stdout)
	var other []string // what else it said: a failure's message
	said := func(prefix string) (string, error) {
		for lines.Scan() {
			if rest, ok := strings.CutPrefix(lines.Text(), prefix); ok {
				return rest, nil
			}
			other = append(other, lines.Text())
		}
		return "", fmt.Errorf("the paused holder never said %q (%v): %s", prefix, lines.Err(), strings.Join(other, " | "))
	}
	token, err := said("PAUSED ")
	if err != nil {
		return err
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	b, err := during(ctx)
	if err != nil {
		return err
	}
	// B waits for A's lock to expire: that is the pause past the TTL,
	// however long it takes here. An error is the row's unavailability.
	_, berr := f.Do(ctx, b, key)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		return err
	}
	result, err := said("RESULT ")
	if err != nil {
		return err
	}
	where := "between its read and its write"
	if spec.Guarded {
		where = "before its guarded transaction"
	}
	f.Note("A (pid %d, token %s, TTL %v) stopped with SIGSTOP %s; B took the lock and wrote (%s); A continued: %s",
		cmd.Process.Pid, token, spec.TTL, where, Outcome(berr), result)
	switch result {
	case resultFenced, resultLost, resultLanded:
		return nil
	}
	return fmt.Errorf("the paused holder's stale write neither landed nor was refused: %s", result)
}

// What a paused holder's stale write came to; anything else means the
// fault was not made.
const (
	resultFenced = "its write refused by the fence (ErrFenced)"
	resultLost   = "its guarded transaction refused (ErrLost)"
	resultLanded = "its write landed"
)

// ServePausedHolder is the paused holder's process, when this test binary
// was started as one by PausedHolder (call it first in TestMatrix; served
// reports whether it was). It takes the lock from the Acquirer open makes
// of the spec, reads the item, says "PAUSED <token>" and waits at its
// write (guarded: before its transaction) for a line on stdin (its parent
// stops it, takes the lock and continues it meanwhile); then it writes,
// fenced with its token or not, and says "RESULT …".
func ServePausedHolder(open func(ctx context.Context, spec HolderSpec) (sqlock.Acquirer, func(), error)) (served bool, err error) {
	env := os.Getenv(pausedHolderEnv)
	if env == "" {
		return false, nil
	}
	var spec HolderSpec
	if err := json.Unmarshal([]byte(env), &spec); err != nil {
		return true, err
	}
	ctx := context.Background()
	locks, closeFn, err := open(ctx, spec)
	if err != nil {
		return true, err
	}
	if closeFn != nil {
		defer closeFn()
	}
	db, err := OpenSQL(spec.DSN, &RoundTrips{})
	if err != nil {
		return true, err
	}
	defer db.Close()
	l, err := locks.Acquire(ctx, spec.Name)
	if err != nil {
		return true, err
	}
	defer l.Release(ctx)
	var token int64
	shown := "none"
	if f, ok := l.(sqlock.Fenced); ok {
		shown = strconv.FormatInt(f.Token(), 10)
		if spec.Fenced {
			token = f.Token()
		} else {
			shown += ", not written"
		}
	}
	pause := func(context.Context) {
		fmt.Println("PAUSED " + shown)
		bufio.NewReader(os.Stdin).ReadString('\n')
		// Its connections may be to a server that is gone (a failover):
		// the write goes where the pool's next connection goes.
		db.SetMaxIdleConns(0)
		db.SetMaxIdleConns(2)
	}
	st := &State{Workload: spec.Workload, Schema: spec.Schema, Items: spec.Items, Events: spec.Events}
	var r Result
	if spec.Guarded {
		r, err = guardedApply(ctx, l, db, st, spec.Key, pause)
	} else {
		r, err = st.Apply(ctx, PauseBeforeWrite(db, pause), spec.Key, token)
	}
	switch {
	case errors.Is(err, ErrFenced):
		fmt.Println("RESULT " + resultFenced)
	case errors.Is(err, sqlock.ErrLost):
		fmt.Println("RESULT " + resultLost)
	case err != nil:
		fmt.Println("RESULT error: " + strings.ReplaceAll(err.Error(), "\n", " "))
	case r == Done:
		fmt.Println("RESULT " + resultLanded)
	default:
		fmt.Println("RESULT refused")
	}
	return true, nil
}

// guardedApply pauses, then applies the operation on key in a transaction
// l guards.
func guardedApply(ctx context.Context, l sqlock.Lock, db *sql.DB, st *State, key string, pause func(context.Context)) (Result, error) {
	g, ok := l.(TxGuard)
	if !ok {
		return 0, fmt.Errorf("matrix: a guarded holder's lock (%T) cannot guard a transaction", l)
	}
	pause(ctx)
	tx, err := g.BeginGuarded(ctx, db, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	r, err := st.Apply(ctx, tx, key, 0)
	if err != nil {
		return 0, err
	}
	return r, tx.Commit()
}
