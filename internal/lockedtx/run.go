package lockedtx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/heldkeys"
	"github.com/sqlock/sqlock/internal/pgcancel"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/txbatch"
	"github.com/sqlock/sqlock/internal/waitbound"
	"github.com/sqlock/sqlock/observe"
)

// Tx is the part of a begun transaction Run drives: the lock statements
// (when BEGIN did not carry them), COMMIT and ROLLBACK.
type Tx interface {
	// Exec runs argument-less statements the engine built (several,
	// separated by semicolons); it must send them by the simple query
	// protocol, as database/sql's ExecContext does with pgx's and lib/pq's
	// drivers.
	Exec(ctx context.Context, sql string) error
	// Commit commits. Its error is classified: a server error (SQLSTATE,
	// severity ERROR) is returned as it is, anything that leaves the
	// outcome unknown becomes an *AmbiguousCommitError.
	Commit(ctx context.Context) error
	// Rollback rolls back. ctx is detached from the caller's cancellation.
	Rollback(ctx context.Context) error
}

// BeginFunc begins the transaction of one attempt and returns the value fn
// receives, the Tx Run drives, and whether BEGIN carried the attempt's
// locks (folded; then Run does not send them). It must pass ctx to the
// BEGIN call: ctx is the transaction's context, which ends with a
// cancellation of the caller's while BEGIN, the lock wait and COMMIT run
// (with the caller's deadline only waitbound.Grace after it: the server's
// lock_timeout ends a deadline-bound wait first), but not while fn runs,
// so that database/sql never rolls the transaction back behind Run's back.
// A database/sql adapter begins through BeginSQL, a pgx one through
// BeginPgx, which fold where they can. When it returns an error, no
// transaction may be left open.
type BeginFunc[T any] func(ctx context.Context, a *Attempt) (v T, tx Tx, folded bool, err error)

// Run runs fn in a transaction begun by begin that holds the advisory
// locks on key and on the keys of the AlsoLock option, with the semantics
// documented on package txlock: validation, the lock statements in
// canonical order (unless BEGIN carried them), fn, COMMIT or ROLLBACK, the
// classification of lock and COMMIT errors, retries and observation.
//
// db is the database handle the transactions run on (the *sql.DB under a
// *gorm.DB or *sqlx.DB, a *pgxpool.Pool), nil if unknown; it must be
// comparable (a pointer). A request on the same handle from inside fn,
// with fn's context, is checked against the locks fn's transaction holds
// (package holds), and so is this one against the locks ctx carries. The
// caller checks its own handle for nil (ErrNilDB).
//
// A prepared-statement failure of a pooler (pgerr.PoolerPrepared), from
// the lock statements or from fn's, is returned as the error that names
// its cure.
func Run[T any, O ~func(*Config)](ctx context.Context, db any, key advisory.Key, begin BeginFunc[T], fn func(context.Context, T) error, opts []O) error {
	return pgerror.PoolerPrepared(run(ctx, db, key, begin, fn, opts))
}

func run[T any, O ~func(*Config)](ctx context.Context, db any, key advisory.Key, begin BeginFunc[T], fn func(context.Context, T) error, opts []O) error {
	if begin == nil || fn == nil {
		return ErrNilFunc
	}
	cfg := newConfig(opts)
	if cfg.Err == nil {
		cfg.Err = cfg.checkUnlocked()
	}
	if cfg.Err != nil {
		return cfg.Err
	}
	p, err := newPlan(key, &cfg)
	if err != nil {
		return err
	}
	if tag, held := heldkeys.Conflict(ctx, db, p.tags, p.shared); held {
		return fmt.Errorf("txlock: key %s: %w", p.keys[slices.Index(p.tags, tag)], ErrAlreadyHeld)
	}
	r := &runner[T]{cfg: &cfg, plan: p, hold: heldkeys.Hold{Handle: db, Tags: p.tags, Shared: p.shared}, begin: begin, fn: fn}
	policy := cfg.retryPolicy()
	if policy == nil {
		return r.attempt(ctx, 1)
	}
	n := 0
	return policy.Do(ctx, func(ctx context.Context) error {
		n++
		if cfg.Unlocked == nil {
			return r.attempt(ctx, n)
		}
		if cfg.Hot == nil {
			if n == 1 {
				return cfg.Unlocked(ctx)
			}
			return r.attempt(ctx, n)
		}
		hot := cfg.Hot.slot(p.keys[0])
		if n == 1 && hot.enterLockFree() {
			defer hot.leaveLockFree()
			return cfg.Unlocked(ctx)
		}
		hot.enterLocked()
		defer hot.leaveLocked()
		return r.attempt(ctx, n)
	})
}

// errUnlockedOption is the refusal of an option that makes no sense when
// the first attempt is unlocked (txlock.DoOptimistic).
func errUnlockedOption(name, why string) error {
	return errkind.New(sqlock.ErrInvalidOption, "txlock: DoOptimistic: %s %s", name, why)
}

// checkUnlocked refuses the options an unlocked first attempt cannot
// honour: with no retry there is no locked attempt, a shared lock does not
// exclude the other retriers, and a try-once lock would give up where the
// point is to queue.
func (c *Config) checkUnlocked() error {
	switch {
	case c.Unlocked == nil && c.Hot != nil:
		return errkind.New(sqlock.ErrInvalidOption, "txlock: WithHotKeys: only DoOptimistic's first attempts can queue when a key is hot")
	case c.Unlocked == nil:
		return nil
	case c.NoRetry:
		return errUnlockedOption("WithoutRetry", "leaves no attempt to take the lock")
	case c.Shared:
		return errUnlockedOption("Shared", "does not keep the retrying writers apart")
	case c.TryOnce:
		return errUnlockedOption("TryOnce", "gives up where the retries should queue for the lock")
	}
	return nil
}

// runner is one call of Run: what every attempt shares.
type runner[T any] struct {
	cfg   *Config
	plan  *plan
	hold  heldkeys.Hold
	begin BeginFunc[T]
	fn    func(context.Context, T) error
}

// attempt runs one attempt: lock (BEGIN and the locks), fn, then COMMIT or
// ROLLBACK.
func (r *runner[T]) attempt(ctx context.Context, n int) error {
	a := &Attempt{n: n, plan: r.plan, cfg: r.cfg, ctx: ctx}
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// The deadline passed before anything was sent: no time left
			// to wait, the typed timeout a wait the deadline bounded ends
			// with (and advisory's answer to the same context).
			return r.lockFailed(a, time.Now(), errNoTime)
		}
		return err
	}
	t := newTxContext(ctx)
	defer t.cancel()
	a.tc = t
	start := time.Now()
	v, tx, err := r.lock(t, a, start)
	if err != nil {
		return err
	}
	locked := time.Now()
	if err := r.run(ctx, a, tx, v, locked.Sub(start), locked); err != nil {
		return err
	}
	return r.commit(t, a, tx, locked)
}

// lock begins the attempt's transaction and takes its locks: with BEGIN
// when the BeginFunc folded them, else as statements of their own. On
// failure nothing is left open and the error is classified (lockFailed).
func (r *runner[T]) lock(t *txContext, a *Attempt, start time.Time) (v T, tx Tx, err error) {
	if !a.bind() { // the deadline is too close for any wait: nothing is sent
		return v, nil, r.lockFailed(a, start, errNoTime)
	}
	t.follow()
	v, tx, folded, err := r.begin(t.ctx, a)
	if err == nil && tx == nil {
		err = errors.New("txlock: BeginFunc returned no Tx")
	}
	if err != nil {
		t.settle()
		return v, nil, r.lockFailed(a, start, err)
	}
	if !folded {
		err = lockAfterBegin(t.ctx, tx, a)
	}
	if t.settle() && pgerror.Code(err) != pgerror.QueryCanceled {
		// A cancel request went out, and the statement ended otherwise
		// (the lock was granted first): a pooler could still forward the
		// request to the connection's next statement, so the connection
		// is not used again. Closing it ends the transaction and its
		// locks on the server.
		t.closeConn()
	}
	if err == nil {
		err = a.ctx.Err()
	}
	if err != nil {
		rollback(a.ctx, tx)
		return v, nil, r.lockFailed(a, start, err)
	}
	return v, tx, nil
}

// run reports the locks acquired (after wait) and runs fn in the locked
// transaction. When fn fails (or the caller's context ended, so that
// nothing is committed for a caller who has gone away), it rolls back and
// returns the error. A panic (or runtime.Goexit) in user code — the
// observer's Acquired event, fn — rolls back, which releases the locks and
// the connection, and goes on.
func (r *runner[T]) run(ctx context.Context, a *Attempt, tx Tx, v T, wait time.Duration, locked time.Time) error {
	returned := false
	defer func() {
		if !returned {
			rollback(ctx, tx)
			r.released(a, locked, nil)
		}
	}()
	r.cfg.observe(ctx, r.plan, observe.Event{Kind: observe.LockAcquire, Outcome: observe.Acquired, Attempt: a.n, Wait: wait})
	h := r.hold // a copy of its own for this attempt
	err := r.fn(heldkeys.With(ctx, &h), v)
	returned = true
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		ended := time.Now()
		rollback(ctx, tx)
		a.released(locked, ended)
		r.released(a, locked, nil)
	}
	return err
}

// commit sends COMMIT. Like the lock wait, it is not cut by the deadline,
// and a cancellation ends it on the server (see follow): cut, its outcome
// would be unknown and the connection lost; ended by the server, it says
// which. A COMMIT error that leaves the outcome unknown (the connection
// lost, or a server that did not answer the cancellation within
// waitbound.Grace) becomes an *AmbiguousCommitError.
func (r *runner[T]) commit(t *txContext, a *Attempt, tx Tx, locked time.Time) error {
	t.follow()
	ended := time.Now()
	err := tx.Commit(t.ctx)
	t.settle()
	if err == nil {
		a.released(locked, ended)
	}
	switch {
	case err != nil && a.ctx.Err() != nil && pgerror.Code(err) == pgerror.QueryCanceled:
		// The caller's cancellation ended COMMIT on the server (a cancel
		// request, see follow), which rolled the transaction back: the
		// outcome is known.
		err = fmt.Errorf("%w: COMMIT cancelled on the server, nothing committed: %w", a.ctx.Err(), err)
	case err != nil && pgerror.CommitAmbiguous(err):
		err = &AmbiguousCommitError{Err: err}
	}
	r.released(a, locked, err)
	return err
}

// released reports the end of the hold: Lost for an ambiguous COMMIT.
func (r *runner[T]) released(a *Attempt, locked time.Time, err error) {
	ev := observe.Event{Kind: observe.LockRelease, Outcome: observe.Released, Attempt: a.n, Hold: time.Since(locked), Err: err}
	if errors.Is(err, ErrAmbiguousCommit) {
		ev.Outcome = observe.Lost
		ev.Err = errors.Unwrap(err)
	}
	r.cfg.observe(a.ctx, r.plan, ev)
}

// errNoTime is what the lock step returns when the caller's deadline
// leaves no time to wait for the locks: nothing was sent (or BEGIN only,
// rolled back).
var errNoTime = errors.New("txlock: no time left before the context's deadline to wait for the locks")

// lockAfterBegin takes a's locks in a transaction BEGIN did not lock: one
// key (waiting, not try-once) as one prepared statement where the driver
// prepares cheaply, else every key in one simple-protocol message (one
// round trip for any number of keys; try-once's answer read as an error).
func lockAfterBegin(ctx context.Context, tx Tx, a *Attempt) error {
	p := a.plan
	if !a.bind() {
		return errNoTime
	}
	if b, ok := tx.(boundExecer); ok && len(p.queries) == 1 && !p.tryOnce {
		q := a.queries()[0]
		return b.execBound(ctx, q.sql, q.args...)
	}
	return tx.Exec(ctx, p.lockText(a.timeout))
}

// boundExecer is a Tx whose driver runs a statement with bind arguments as
// cheaply as one without: pgx's database/sql driver, which prepares it once
// per connection (lib/pq, for one, spends a round trip preparing each).
type boundExecer interface {
	execBound(ctx context.Context, sql string, args ...any) error
}

// rollback ends tx after a failure. Its error is not reported: when ROLLBACK
// cannot be sent, the driver closes the connection and the server rolls the
// transaction back (and releases the locks) when it sees the connection go.
func rollback(ctx context.Context, tx Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txbatch.CleanupTimeout)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// lockFailed classifies an error from BEGIN or the lock statements.
func (r *runner[T]) lockFailed(a *Attempt, start time.Time, err error) error {
	p, ctx := r.plan, a.ctx
	wait := time.Since(start)
	code := pgerror.Code(err)
	if cerr := ctx.Err(); cerr != nil && (isContextErr(err) || code == pgerror.QueryCanceled) {
		// The caller's context ended the wait: say so, whatever the
		// driver made of it (the transaction's context reports Canceled
		// for a deadline; lib/pq reports the cancel request's 57014).
		err, code = cerr, ""
	}
	ev := observe.Event{Kind: observe.LockAcquire, Attempt: a.n, Wait: wait, Err: err}
	switch {
	case p.tryOnce && (errors.Is(err, errHeldElsewhere) ||
		code == pgerror.InvalidTextRepr && strings.Contains(err.Error(), notAcquiredMarker)):
		ev.Outcome = observe.Busy
		err = &LockError{Keys: p.keys, Shared: p.shared, TryOnce: true, Wait: wait}
	case errors.Is(err, errNoTime) || err == context.DeadlineExceeded:
		// No time left to wait, or the deadline came first while the
		// attempt waited for a pooled connection (or a server that did not
		// answer): the typed timeout, as advisory answers the same.
		ev.Outcome = observe.Timeout
		err = &LockError{Keys: p.keys, Shared: p.shared, Wait: wait, ByDeadline: true}
	case code == pgerror.LockNotAvailable:
		ev.Outcome = observe.Timeout
		err = &LockError{Keys: p.keys, Shared: p.shared, Timeout: a.timeout, Wait: wait, Err: err, ByDeadline: a.byDeadline}
	case code == pgerror.DeadlockDetected:
		ev.Outcome = observe.Deadlock
	case ctx.Err() != nil || isContextErr(err):
		ev.Outcome = observe.Canceled
	default:
		ev.Outcome = observe.Failed
	}
	r.cfg.observe(ctx, p, ev)
	return err
}

// txContext is the transaction's own context. It follows the caller's
// only while BEGIN (and the lock wait) and COMMIT run: database/sql rolls
// a transaction back from a goroutine of its own when that context ends —
// racing with the synchronous ROLLBACK of a failed fn and, with pgx's
// driver, closing the connection — so it must not end while fn runs. fn's
// statements get the caller's ctx and are interrupted by it as usual.
type txContext struct {
	ctx    context.Context
	cancel context.CancelFunc
	caller context.Context

	// settle ends the step follow armed; nil when none is armed.
	settleFn func() (requested bool)

	mu sync.Mutex
	// conn is the attempt's pgx connection once the BeginFunc has it
	// (Attempt.runsOn): where a cancellation's cancel requests go.
	conn *pgx.Conn
	// interrupted: the caller's cancellation came; no statement may start.
	interrupted bool
}

func newTxContext(caller context.Context) *txContext {
	if caller.Done() == nil {
		return &txContext{ctx: caller, cancel: func() {}, caller: caller}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(caller))
	return &txContext{ctx: ctx, cancel: cancel, caller: caller}
}

// follow makes the transaction's context follow the caller's until settle.
//
// A cancellation ends the step on the server: cancel requests to the
// connection's backend (pgcancel.Until) end the lock wait with 57014 on a
// connection that stays sound. Cutting the statement instead — ending the
// context, on which database/sql and pgx close the connection — leaves the
// backend queued for the lock until the server notices, and granted the
// lock meanwhile it holds it ahead of live callers. The context is ended
// only when no pgx connection is known (lib/pq sends its own request and
// waits for the answer) or the server does not answer within
// waitbound.Grace.
//
// The deadline does not end the step: the lock wait's bound ends before it
// (Attempt.bind), on the server, which answers 55P03 and keeps the
// connection. Only waitbound.Grace after the deadline — a server that does
// not answer — is the statement cut.
func (t *txContext) follow() {
	ctx := t.caller
	if ctx.Done() == nil {
		return
	}
	ended, done := make(chan struct{}), make(chan struct{})
	var grace *time.Timer
	requested := false
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			grace = time.AfterFunc(waitbound.Grace, t.cancel)
			return
		}
		conn := t.interrupt()
		if conn == nil {
			t.cancel()
			return
		}
		requested = true
		if !pgcancel.Until(conn.PgConn(), ended, waitbound.Grace) {
			t.cancel()
		}
	})
	t.settleFn = func() bool {
		if !stop() {
			close(ended)
			<-done
		}
		if grace != nil {
			grace.Stop()
		}
		return requested
	}
}

// settle ends the step follow armed, once its statement has returned and
// before the connection goes back to a pool: it waits for the cancel
// requests in flight to be acknowledged. It reports whether one went out.
func (t *txContext) settle() (requested bool) {
	if t.settleFn == nil {
		return false
	}
	requested = t.settleFn()
	t.settleFn = nil
	return requested
}

// interrupt records the caller's cancellation and returns the connection
// to send cancel requests to, nil if none is known yet (then the step is
// cut: nothing was sent on it, and runsOn refuses to send anything).
func (t *txContext) interrupt() *pgx.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.interrupted = true
	return t.conn
}

// closeConn closes the attempt's pgx connection: its pool (database/sql's,
// pgxpool's) then discards it.
func (t *txContext) closeConn() {
	t.mu.Lock()
	c := t.conn
	t.mu.Unlock()
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), txbatch.CleanupTimeout)
	defer cancel()
	c.Close(ctx)
}
