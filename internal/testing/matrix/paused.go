package matrix

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
// make safe anyway: a pause after the check is the same fault.

// pausedHolderEnv carries a paused holder's spec (JSON) to its process.
const pausedHolderEnv = "SQLOCK_MATRIX_PAUSED_HOLDER"

// HolderSpec is what a paused holder's process needs: the lock (its
// name, TTL, whether its token fences the write), the row's own part
// (Backend: where its servers are, for the row's open function) and the
// cell's workload state, which PausedHolder fills in.
type HolderSpec struct {
	TTL     time.Duration
	Fenced  bool
	Backend json.RawMessage

	Name, Key             string
	DSN                   string
	Workload              Workload
	Schema, Items, Events string
}

// PausedHolder runs the fault on cell c (one item) with holder A's lock
// as spec describes, b being B's operation, and notes what happened; an
// error means the fault could not be made.
func (f *FaultRun) PausedHolder(ctx context.Context, c *Cell, spec HolderSpec, b Actor) error {
	key := c.State.Key(0)
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
	token, err := said("READ ")
	if err != nil {
		return err
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	// B waits for A's lock to expire: that is the pause past the TTL,
	// however long it takes here.
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
	bres := "ok"
	if berr != nil {
		bres = berr.Error()
	}
	f.Note("A (pid %d, token %s, TTL %v) stopped with SIGSTOP between its read and its write; B took the lock and wrote (%s); A continued: %s",
		cmd.Process.Pid, token, spec.TTL, bres, result)
	return nil
}

// ServePausedHolder is the paused holder's process, when this test binary
// was started as one by PausedHolder (call it first in TestMatrix; served
// reports whether it was). It takes the lock from the Acquirer open makes
// of the spec, reads the item, says "READ <token>" and waits at its write
// for a line on stdin (its parent stops it, takes the lock and continues
// it meanwhile); then it writes, fenced with its token or not, and says
// "RESULT …".
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
	st := &State{Workload: spec.Workload, Schema: spec.Schema, Items: spec.Items, Events: spec.Events}
	g := NewGate(db)
	go func() {
		<-g.Held
		fmt.Println("READ " + shown)
		bufio.NewReader(os.Stdin).ReadString('\n')
		close(g.Open)
	}()
	r, err := st.Apply(ctx, g, spec.Key, token)
	switch {
	case errors.Is(err, ErrFenced):
		fmt.Println("RESULT its write refused: ErrFenced")
	case err != nil:
		fmt.Println("RESULT " + err.Error())
	case r == Done:
		fmt.Println("RESULT it wrote too")
	default:
		fmt.Println("RESULT refused")
	}
	return true, nil
}
