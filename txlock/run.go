package txlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/holds"
	"github.com/sqlock/sqlock/internal/waitbound"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
)

// cleanupTimeout bounds a ROLLBACK sent after a failure. It runs on a
// context detached from the caller's cancellation, so a cancelled caller
// still gets a clean rollback and keeps the connection.
const cleanupTimeout = 5 * time.Second

// Tx is the part of a begun transaction Run drives: the lock statements (when
// BEGIN did not carry them), COMMIT and ROLLBACK. SQLTx adapts a *sql.Tx;
// adapters for other transaction types implement it in a few lines.
type Tx interface {
	// Exec runs argument-less statements txlock built (several, separated
	// by semicolons); it must send them by the simple query protocol, as
	// database/sql's ExecContext does with pgx's and lib/pq's drivers.
	Exec(ctx context.Context, sql string) error
	// Commit commits. Its error is classified: a server error (SQLSTATE,
	// severity ERROR) is returned as it is, anything that leaves the
	// outcome unknown becomes an *AmbiguousCommitError.
	Commit(ctx context.Context) error
	// Rollback rolls back. ctx is detached from the caller's cancellation.
	Rollback(ctx context.Context) error
}

// BeginFunc begins the transaction of one attempt and returns the value fn
// receives and the Tx Run drives. It must pass ctx to the BEGIN call (and
// begin with a.TxOptions() for database/sql, a.PgxTxOptions() for pgx):
// ctx carries the attempt, so that a connection opened through OpenDB or
// WrapConnector folds the locks into BEGIN, and it is the transaction's
// context — it ends with a cancellation of the caller's while BEGIN, the
// lock wait and COMMIT run (with the caller's deadline only a second after
// it: the server's lock_timeout ends a deadline-bound wait first; see
// Deadlines in the package documentation), but not while fn runs, so that
// database/sql never rolls the transaction back behind Run's back. When it
// returns an error, no transaction may be left open.
type BeginFunc[T any] func(ctx context.Context, a *Attempt) (T, Tx, error)

// Attempt is one run of the transaction, handed to a BeginFunc.
type Attempt struct {
	n     int
	plan  *plan
	cfg   *config
	ctx   context.Context // the caller's
	state atomic.Int32

	// The lock wait's bound for this attempt (see bind): the configured
	// timeout, or, when the caller's deadline comes first, the time to it
	// less what the rest of the transaction needs (byDeadline).
	timeout    time.Duration
	byDeadline bool
	// est is the estimates of the connection the attempt runs on, when the
	// caller's context has a deadline and the connection is a pgx one; nil
	// otherwise (the bound then keeps a cold reserve back).
	est *waitbound.Estimates
}

const (
	statePending int32 = iota // the locks are still to be taken
	stateClaimed              // a connection is folding them into BEGIN
	stateFolded               // BEGIN carried the lock statements
	stateClosed               // begin returned; nothing can fold any more
)

// Number is the 1-based attempt number.
func (a *Attempt) Number() int { return a.n }

// Context is the caller's context. The context a BeginFunc gets follows it
// only while BEGIN runs (see BeginFunc); a transaction type that keeps a
// context for its statements (GORM's) should be given this one.
func (a *Attempt) Context() context.Context { return a.ctx }

// TxOptions are the database/sql transaction options (WithTxOptions; may be
// nil).
func (a *Attempt) TxOptions() *sql.TxOptions { return a.cfg.sqlOpts }

// PgxTxOptions returns the pgx options to begin this attempt with. Unless
// WithPgxTxOptions set a BeginQuery, their BeginQuery is BEGIN with the
// transaction modes followed by the lock statements, so BeginTx takes the
// locks in its one round trip and Run does not send them again: a
// BeginFunc that calls PgxTxOptions must begin with exactly these options.
func (a *Attempt) PgxTxOptions() pgx.TxOptions {
	o := a.cfg.pgxOpts
	if o.BeginQuery != "" || !a.state.CompareAndSwap(statePending, stateFolded) {
		return o
	}
	a.bind() // no time left: the server's lock_timeout of 1 ms ends the wait
	// Modes were validated by newPlan.
	iso, access, def, _ := pgxModes(o)
	return pgx.TxOptions{BeginQuery: a.plan.beginSQL(iso, access, def, a.timeout), CommitQuery: o.CommitQuery}
}

// errNoTime is what a BeginFunc path returns when the caller's deadline
// leaves no time to wait for the locks: nothing was sent (or BEGIN only,
// rolled back).
var errNoTime = errors.New("txlock: no time left before the context's deadline to wait for the locks")

// useConn records the estimates of the pgx connection the attempt runs
// on, when the caller's context has a deadline (only then are they used,
// and kept up to date).
func (a *Attempt) useConn(c *pgx.Conn) {
	if _, ok := a.ctx.Deadline(); ok && !a.plan.tryOnce {
		a.est = estimatesOf(c)
	}
}

// bind fixes the attempt's lock wait bound just before the lock statements
// are sent: the configured timeout, or the time to the caller's deadline
// less the reserve (waitbound) when that is shorter. It reports false when
// no time is left to wait; the bound is then 1 ms, the least lock_timeout
// there is.
func (a *Attempt) bind() bool {
	if a.timeout == 0 {
		a.timeout = a.plan.timeout
	}
	if a.ctx == nil || a.plan.tryOnce {
		return true
	}
	d, ok := a.ctx.Deadline()
	if !ok {
		return true
	}
	a.timeout, a.byDeadline = a.est.Bound(time.Now(), a.plan.timeout, d, true)
	if a.timeout < time.Millisecond {
		a.timeout = time.Millisecond
		return false
	}
	return true
}

// estimatesKey is the key of a connection's estimates in pgconn's
// CustomData.
const estimatesKey = "github.com/sqlock/sqlock/txlock.estimates"

// estimatesOf returns c's round-trip and hold estimates, made on first
// use. They live with the connection (pgconn's CustomData, used by one
// goroutine at a time with the connection): no package state, and they
// go when the connection does.
func estimatesOf(c *pgx.Conn) *waitbound.Estimates {
	m := c.PgConn().CustomData()
	e, _ := m[estimatesKey].(*waitbound.Estimates)
	if e == nil {
		e = new(waitbound.Estimates)
		m[estimatesKey] = e
	}
	return e
}

// claimFold lets one connection fold the locks into its BEGIN.
func (a *Attempt) claimFold() bool { return a.state.CompareAndSwap(statePending, stateClaimed) }

// endFold records whether the claimed fold succeeded.
func (a *Attempt) endFold(ok bool) {
	if ok {
		a.state.Store(stateFolded)
	} else {
		a.state.Store(statePending)
	}
}

type attemptKey struct{}

func attemptFrom(ctx context.Context) *Attempt {
	a, _ := ctx.Value(attemptKey{}).(*Attempt)
	return a
}

// Run is the engine behind Do and DoPgx, for packages that hand fn a
// transaction type of their own (sqlx's *sqlx.Tx, GORM's *gorm.DB): begin
// starts each attempt's transaction and Run does the rest — validation,
// the lock statements in canonical order (unless BEGIN carried them), fn,
// COMMIT or ROLLBACK, the classification of COMMIT errors, retries and
// observation — with the semantics documented on the package. An adapter
// checks its own handle for nil (ErrNilDB) and passes everything else:
//
//	return txlock.Run(ctx, keys, func(ctx context.Context, a *txlock.Attempt) (*sqlx.Tx, txlock.Tx, error) {
//		tx, err := db.BeginTxx(ctx, a.TxOptions())
//		if err != nil {
//			return nil, nil, err
//		}
//		return tx, txlock.SQLTx(tx.Tx), nil
//	}, fn, opts...)
func Run[T any](ctx context.Context, keys []advisory.Key, begin BeginFunc[T], fn func(context.Context, T) error, opts ...Option) error {
	return run(ctx, nil, keys, begin, fn, opts)
}

// RunOn is Run for an adapter that knows the pool its transactions run on
// (the *sql.DB under a *gorm.DB or *sqlx.DB, a *pgxpool.Pool): it names
// the database for the check against waiting on one's own locks (see
// ErrAlreadyHeld), as Do and DoPgx do with their handle. pool must be a
// comparable value (a pointer); nil is Run.
func RunOn[T any](ctx context.Context, pool any, keys []advisory.Key, begin BeginFunc[T], fn func(context.Context, T) error, opts ...Option) error {
	return run(ctx, pool, keys, begin, fn, opts)
}

// run is Run on the database handle db, if known (nil otherwise): a
// request on the same handle, from inside fn with fn's context, is checked
// against the locks fn's transaction holds (package holds), and so is this
// one against the locks the caller's context carries.
func run[T any](ctx context.Context, db any, keys []advisory.Key, begin BeginFunc[T], fn func(context.Context, T) error, opts []Option) error {
	if begin == nil || fn == nil {
		return ErrNilFunc
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return cfg.err
	}
	p, err := newPlan(keys, &cfg)
	if err != nil {
		return err
	}
	if tag, held := holds.Conflict(ctx, db, p.tags, p.shared); held {
		return fmt.Errorf("txlock: key %s: %w", p.keys[slices.Index(p.tags, tag)], ErrAlreadyHeld)
	}
	h := holds.Hold{Handle: db, Tags: p.tags, Shared: p.shared}
	policy := cfg.retryPolicy()
	if policy == nil {
		return runAttempt(ctx, &cfg, p, h, 1, begin, fn)
	}
	n := 0
	return policy.Do(ctx, func(ctx context.Context) error {
		n++
		return runAttempt(ctx, &cfg, p, h, n, begin, fn)
	})
}

func runAttempt[T any](ctx context.Context, c *config, p *plan, h holds.Hold, n int, begin BeginFunc[T], fn func(context.Context, T) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	a := &Attempt{n: n, plan: p, cfg: c, ctx: ctx, timeout: p.timeout}
	start := time.Now()
	if !a.bind() { // the deadline is too close for any wait: nothing is sent
		return c.lockFailed(ctx, a, start, errNoTime)
	}
	// The transaction's own context follows the caller's only while BEGIN
	// (and the lock wait) and COMMIT run. database/sql rolls a transaction
	// back from a goroutine of its own when that context ends — racing
	// with the synchronous ROLLBACK below and, with pgx's driver, closing
	// the connection — so it must not end while fn runs: fn's statements
	// get the caller's ctx and are interrupted by it as usual.
	tctx, tcancel, disarm := ctx, context.CancelFunc(func() {}), func() {}
	if ctx.Done() != nil {
		tctx, tcancel = context.WithCancel(context.WithoutCancel(ctx))
		disarm = follow(ctx, tcancel)
	}
	defer tcancel()
	v, tx, err := begin(context.WithValue(tctx, attemptKey{}, a), a)
	folded := a.state.Swap(stateClosed) == stateFolded
	if err == nil && tx == nil {
		err = errors.New("txlock: BeginFunc returned no Tx")
	}
	if err != nil {
		disarm()
		return c.lockFailed(ctx, a, start, err)
	}
	if !folded {
		err = lockAfterBegin(tctx, tx, a)
	}
	disarm()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		rollback(ctx, tx)
		return c.lockFailed(ctx, a, start, err)
	}
	locked := time.Now()
	// A panic (or runtime.Goexit) in user code from here to fn's return —
	// the observer's Acquired event, fn — skips the assignment: the
	// deferred rollback ends the transaction, which releases the locks and
	// the connection, and the panic goes on.
	returned := false
	defer func() {
		if !returned {
			rollback(ctx, tx)
			c.observe(ctx, p, observe.Event{Kind: observe.LockRelease, Outcome: observe.Released, Attempt: n, Hold: time.Since(locked)})
		}
	}()
	c.observe(ctx, p, observe.Event{Kind: observe.LockAcquire, Outcome: observe.Acquired, Attempt: n, Wait: locked.Sub(start)})
	err = fn(holds.With(ctx, &h), v) // h is a copy of its own for this attempt
	returned = true
	if err == nil {
		// Never COMMIT for a caller who has gone away.
		err = ctx.Err()
	}
	if err != nil {
		ended := time.Now()
		rollback(ctx, tx)
		a.released(locked, ended)
		c.observe(ctx, p, observe.Event{Kind: observe.LockRelease, Outcome: observe.Released, Attempt: n, Hold: time.Since(locked)})
		return err
	}
	// COMMIT, like the lock wait, is not cut by the deadline (only by a
	// cancellation, or waitbound.Grace past the deadline): cut, its
	// outcome would be unknown and the connection lost; let through, it
	// says which.
	if ctx.Done() != nil {
		disarm = follow(ctx, tcancel)
	}
	ended := time.Now()
	err = tx.Commit(tctx)
	disarm()
	if err == nil {
		a.released(locked, ended)
	}
	ev := observe.Event{Kind: observe.LockRelease, Outcome: observe.Released, Attempt: n, Hold: time.Since(locked), Err: err}
	if err != nil && commitAmbiguous(err) {
		ev.Outcome = observe.Lost
		err = &AmbiguousCommitError{Err: err}
	}
	c.observe(ctx, p, ev)
	return err
}

// released feeds the connection's estimates (when kept: see useConn) after
// the transaction ended with COMMIT or ROLLBACK, sent at sent: the
// statement's round trip (it never waits for a lock) and the hold, from
// the grant at locked to now.
func (a *Attempt) released(locked, sent time.Time) {
	if a.est == nil {
		return
	}
	now := time.Now()
	a.est.ObserveRTT(now.Sub(sent))
	a.est.ObserveHold(now.Sub(locked))
}

// follow makes tcancel, which ends the transaction's context, follow ctx
// while BEGIN and the lock wait run, and returns the function that stops
// it. A cancellation ends them at once. The deadline does not: the lock
// wait's bound ends before it (bind), on the server, which answers 55P03
// and keeps the connection, where a statement cut by the context costs the
// connection (pgx closes it; the next call dials a new one). Only
// waitbound.Grace after the deadline — a server that does not answer —
// is the statement cut.
func follow(ctx context.Context, tcancel context.CancelFunc) (disarm func()) {
	if _, ok := ctx.Deadline(); !ok {
		stop := context.AfterFunc(ctx, tcancel)
		return func() { stop() }
	}
	var mu sync.Mutex
	var grace *time.Timer
	stopped := false
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			tcancel()
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			grace = time.AfterFunc(waitbound.Grace, tcancel)
		}
	})
	return func() {
		stop()
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if grace != nil {
			grace.Stop()
		}
	}
}

// boundExecer is a Tx whose driver runs a statement with bind arguments as
// cheaply as one without: pgx's database/sql driver, which prepares it once
// per connection (lib/pq, for one, spends a round trip preparing each).
type boundExecer interface {
	execBound(ctx context.Context, sql string, args ...any) error
}

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
		return b.execBound(ctx, p.queries[0].sql, p.queryArgs(0, a.timeout)...)
	}
	return tx.Exec(ctx, p.lockTextFor(a.timeout))
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// rollback ends tx after a failure. Its error is not reported: when ROLLBACK
// cannot be sent, the driver closes the connection and the server rolls the
// transaction back (and releases the locks) when it sees the connection go.
func rollback(ctx context.Context, tx Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// lockFailed classifies an error from BEGIN or the lock statements.
func (c *config) lockFailed(ctx context.Context, a *Attempt, start time.Time, err error) error {
	p, n := a.plan, a.n
	wait := time.Since(start)
	code := retry.SQLState(err)
	if cerr := ctx.Err(); cerr != nil && (isContextErr(err) || code == codeQueryCanceled) {
		// The caller's context ended the wait: say so, whatever the
		// driver made of it (the transaction's context reports Canceled
		// for a deadline; lib/pq reports the cancel request's 57014).
		err, code = cerr, ""
	}
	ev := observe.Event{Kind: observe.LockAcquire, Attempt: n, Wait: wait, Err: err}
	switch {
	case p.tryOnce && (errors.Is(err, errHeldElsewhere) ||
		code == codeInvalidText && strings.Contains(err.Error(), notAcquiredMarker)):
		ev.Outcome = observe.Busy
		err = &LockError{Keys: p.keys, Shared: p.shared, TryOnce: true, Wait: wait}
	case errors.Is(err, errNoTime):
		ev.Outcome = observe.Timeout
		err = &LockError{Keys: p.keys, Shared: p.shared, Wait: wait, byDeadline: true}
	case code == retry.CodeLockNotAvailable:
		ev.Outcome = observe.Timeout
		err = &LockError{Keys: p.keys, Shared: p.shared, Timeout: a.timeout, Wait: wait, Err: err, byDeadline: a.byDeadline}
	case code == retry.CodeDeadlockDetected:
		ev.Outcome = observe.Deadlock
	case ctx.Err() != nil || isContextErr(err):
		ev.Outcome = observe.Canceled
	default:
		ev.Outcome = observe.Failed
	}
	c.observe(ctx, p, ev)
	return err
}

const (
	codeInvalidText   = "22P02"
	codeQueryCanceled = "57014"
)

// pqErrInFailedTransaction is the text of lib/pq's ErrInFailedTransaction,
// which its Commit returns, after rolling back, for a transaction a
// statement had already aborted (matched by text so that txlock does not
// import a second driver).
const pqErrInFailedTransaction = "pq: could not complete operation in a failed transaction"

// commitAmbiguous reports whether a COMMIT that returned err may have
// committed. The outcome is known when the server answered with an error
// (severity ERROR: PostgreSQL never reports ERROR for a transaction it
// committed), when COMMIT was never sent, or when the transaction had
// already ended or was aborted. Anything else — a broken connection, a
// context that ended while COMMIT was in flight, a FATAL that ended the
// session — is unknown.
func commitAmbiguous(err error) bool {
	switch {
	case errors.Is(err, pgx.ErrTxCommitRollback), errors.Is(err, pgx.ErrTxClosed),
		errors.Is(err, sql.ErrTxDone), err.Error() == pqErrInFailedTransaction:
		return false
	case pgconn.SafeToRetry(err): // nothing was sent
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		sev := pgErr.SeverityUnlocalized
		if sev == "" {
			sev = pgErr.Severity
		}
		return sev == "FATAL" || sev == "PANIC"
	}
	code := retry.SQLState(err)
	// Other drivers: a SQLSTATE means the server answered, except for the
	// classes it sends when it ends the session.
	return code == "" || strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P")
}

func (c *config) observe(ctx context.Context, p *plan, e observe.Event) {
	if isNop(c.observer) {
		return
	}
	e.Source = "txlock"
	e.Shared = p.shared
	for _, k := range p.keys {
		e.Key = observedKey(k)
		c.observer.Observe(ctx, e)
	}
}
