package advisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/heldkeys"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/waitbound"
	"github.com/sqlock/sqlock/observe"
)

// Defaults.
const (
	DefaultTimeout        = 5 * time.Second
	DefaultKeepalive      = 2 * time.Second
	DefaultReleaseTimeout = 3 * time.Second
)

// lockTimeoutGrace is how long after the wait bound the client stops
// waiting for the server's answer itself (a server that does not answer at
// all, such as behind a network partition).
const lockTimeoutGrace = waitbound.Grace

// Locker takes session-level advisory locks on one database. It is safe for
// concurrent use; make one per pool and share it.
type Locker struct {
	b   backend
	cfg config
	err error // from New: nil handle or invalid option

	keeper *keeper   // keepalive checks of the held locks
	names  *keyNames // nil unless WithKeyNames
	mux    *mux      // nil unless WithMultiplexing
	bounds *bounds   // wait bounds of acquisitions waiting for a connection

	// est is the round trip and hold time measured on this Locker's
	// connections (unlocks, keepalives; grant to unlock): what a wait bound
	// by the caller's deadline keeps back for the holder (see noTimeToWait
	// and lockTimeout).
	est waitbound.Estimates

	verified atomic.Bool
	probeSem chan struct{} // one probe at a time; guards probeErr
	probeErr error         // a definitive refusal (sqlock.ErrUnsupported)
}

type config struct {
	wait          time.Duration
	keepalive     time.Duration
	unlockTimeout time.Duration
	obs           observe.Observer
	log           *slog.Logger
	keyNames      bool
	muxConns      int // WithMultiplexing; 0: a connection per lock
}

// Option configures a Locker.
type Option func(*config) error

// WithTimeout bounds every acquisition: the wait for a pooled
// connection and for the lock together (default DefaultTimeout). A
// context deadline that comes earlier wins. It must be positive (zero or
// negative: [sqlock.ErrInvalidOption]): no wait is unbounded; TryLock does not wait.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidOption("wait timeout %v must be positive", d)
		}
		c.wait = d
		return nil
	}
}

// WithKeepalive sets how often a held lock's connection is checked (one
// round trip, SELECT pg_backend_pid(); default DefaultKeepalive). A lock
// whose connection failed visibly — reset, closed, its backend terminated,
// the server shut down — is reported through Lost by the next check: checks
// run every interval to 1¼ intervals, all of a Locker's from one timer. A
// connection that silently stops answering is reported when a check has
// waited max(interval, 1s) for an answer. It must be positive.
func WithKeepalive(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidOption("keepalive interval %v must be positive", d)
		}
		c.keepalive = d
		return nil
	}
}

// WithReleaseTimeout bounds [Lock.Release] (default DefaultReleaseTimeout). It
// runs on a context detached from the caller's cancellation, with
// this deadline of its own; if it cannot be confirmed in time the
// connection is closed, which releases the lock. It must be positive.
func WithReleaseTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidOption("release timeout %v must be positive", d)
		}
		c.unlockTimeout = d
		return nil
	}
}

// WithObserver reports acquisitions (with outcome and wait time) and
// releases (released or lost, with hold time) to o, with Source "advisory"
// and System "postgresql". The default does nothing. Events come from the calling goroutine, except a loss found by
// a keepalive check, which is reported from the check's goroutine. If o
// panics, the lock of the call (and its connection) is released before the
// panic goes on; a panic on a loss, in the check's goroutine, ends the
// program as any goroutine's panic does (the connection is already
// closed). Several WithObserver options add up ([observe.Multi]); a nil o adds
// nothing. The same holds in every sqlock package: see [observe].
func WithObserver(o observe.Observer) Option {
	return func(c *config) error {
		c.obs = observe.Multi(c.obs, o)
		return nil
	}
}

// WithLogger logs what a caller cannot see otherwise: connections closed
// because their state was in doubt, lost locks, a refused server. The
// default logs nothing. It is not an observer: for every acquisition and
// release, use WithObserver([observe.Slog](l)). A later WithLogger replaces
// an earlier one; a nil l logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.log = l
		return nil
	}
}

// New returns a Locker on a database/sql pool with any PostgreSQL driver
// (pgx's stdlib, lib/pq). Each held lock takes one connection out of the
// pool for as long as it is held, so size the pool for the locks held at
// once plus the other work, or share connections with [WithMultiplexing].
//
// New does not fail: a nil db or an invalid option is reported, as an
// error matching [sqlock.ErrNilHandle] or [sqlock.ErrInvalidOption], by every method.
func New(db *sql.DB, opts ...Option) *Locker {
	var b backend
	if db != nil {
		b = newSQLBackend(db)
	}
	return newLocker(b, opts)
}

// NewPool is New for a pgx pool.
func NewPool(pool *pgxpool.Pool, opts ...Option) *Locker {
	var b backend
	if pool != nil {
		b = pgxBackend{pool}
	}
	return newLocker(b, opts)
}

func newLocker(b backend, opts []Option) *Locker {
	l := &Locker{
		b: b,
		cfg: config{
			wait:          DefaultTimeout,
			keepalive:     DefaultKeepalive,
			unlockTimeout: DefaultReleaseTimeout,
			obs:           observe.Nop{},
			log:           slog.New(slog.DiscardHandler),
		},
		probeSem: make(chan struct{}, 1),
	}
	if b == nil {
		l.err = &Error{Op: "new", Err: errNilHandle}
		return l
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&l.cfg); err != nil {
			l.err = &Error{Op: "new", Err: err}
			return l
		}
	}
	l.keeper = newKeeper(l.cfg.keepalive)
	l.bounds = newBounds()
	if l.cfg.keyNames {
		l.names = &keyNames{}
	}
	if l.cfg.muxConns > 0 {
		l.mux = newMux(l, l.cfg.muxConns)
	}
	return l
}

// Verify checks the Locker's configuration and the server once: real
// PostgreSQL whose hashtext and hashtextextended agree with package hash,
// and a connection that keeps one server session (not PgBouncer in
// transaction mode). The first acquisition does the same; call Verify to
// fail fast at start-up. A refusal ([sqlock.ErrUnsupported]) is remembered; a
// failure to connect is not.
func (l *Locker) Verify(ctx context.Context) error {
	if l.err != nil {
		return l.err
	}
	if err := l.verify(ctx); err != nil {
		return l.wrapVerify("verify", Key{}, ctx, err)
	}
	return nil
}

// Lock takes the exclusive lock on key, waiting up to the wait timeout or
// until ctx ends. The wait happens inside PostgreSQL, in its fair queue and
// visible to its deadlock detector. Errors: ErrTimeout (the wait ran out),
// ErrDeadlock, a context error, ErrAlreadyHeld, ErrUnavailable,
// [sqlock.ErrUnsupported], ErrInvalidKey.
//
// A nil error means the lock is held and must be given up with [Lock.Release]. If
// ctx ends just as the lock is granted, Lock releases it and returns the
// context's error.
func (l *Locker) Lock(ctx context.Context, key Key) (*Lock, error) {
	return l.acquire(ctx, "lock", key, false, false)
}

// TryLock takes the exclusive lock on key if no other session holds it,
// without waiting for it; ErrNotAcquired if one does.
func (l *Locker) TryLock(ctx context.Context, key Key) (*Lock, error) {
	return l.acquire(ctx, "trylock", key, false, true)
}

// RLock takes key's lock in shared mode (pg_advisory_lock_shared): any
// number of shared holders at once, none while an exclusive holder holds it.
// A shared request queues behind a waiting exclusive one, so writers are not
// starved.
func (l *Locker) RLock(ctx context.Context, key Key) (*Lock, error) {
	return l.acquire(ctx, "rlock", key, true, false)
}

// TryRLock is the try-once form of RLock.
func (l *Locker) TryRLock(ctx context.Context, key Key) (*Lock, error) {
	return l.acquire(ctx, "tryrlock", key, true, true)
}

// Do runs fn while holding key's exclusive lock, then unlocks. fn's context
// ends when ctx does or when the lock is lost; then context.Cause of it
// matches ErrLost. Do returns fn's error, joined with the unlock's error
// when that fails too (after a loss it matches ErrLost). If fn panics, the
// lock is released and the panic goes on.
//
// Inside fn, taking the same key again from this Locker with fn's context
// returns ErrAlreadyHeld at once.
func (l *Locker) Do(ctx context.Context, key Key, fn func(ctx context.Context) error) error {
	return l.do(ctx, "lock", key, false, fn)
}

// DoShared is Do with the lock in shared mode.
func (l *Locker) DoShared(ctx context.Context, key Key, fn func(ctx context.Context) error) error {
	return l.do(ctx, "rlock", key, true, fn)
}

func (l *Locker) do(ctx context.Context, op string, key Key, shared bool, fn func(context.Context) error) error {
	if fn == nil {
		return &Error{Op: "do", Key: key, Err: errNilFunc}
	}
	lk, err := l.acquire(ctx, op, key, shared, false)
	if err != nil {
		return err
	}
	fctx, cancel := lk.Context(ctx)
	defer cancel()
	returned := false
	defer func() {
		if !returned { // fn panicked: fn never touches the connection, so a normal unlock is sound
			lk.Release(ctx)
		}
	}()
	ferr := fn(fctx)
	returned = true
	uerr := lk.Release(ctx)
	switch {
	case uerr == nil:
		return ferr
	case ferr == nil:
		return uerr
	}
	return errors.Join(ferr, uerr)
}

func (l *Locker) emit(ctx context.Context, e observe.Event) {
	e.Source, e.System = "advisory", "postgresql" // OpenTelemetry's db.system.name
	l.cfg.obs.Observe(ctx, e)
}

// outcome classifies an acquisition error for observers.
func outcome(err error) observe.Outcome {
	switch {
	case errors.Is(err, ErrTimeout):
		return observe.Timeout
	case errors.Is(err, ErrDeadlock):
		return observe.Deadlock
	case errors.Is(err, ErrNotAcquired):
		return observe.Busy
	case errors.Is(err, context.Canceled):
		return observe.Canceled
	}
	return observe.Failed
}

// wrapVerify turns a probe or connection failure into an *Error.
func (l *Locker) wrapVerify(op string, key Key, ctx context.Context, err error) error {
	var e *Error
	switch {
	case errors.As(err, &e) && e.Err != nil:
		return &Error{Op: op, Key: key, Err: e.Err, Cause: e.Cause}
	case ctx.Err() != nil:
		return ctxError(op, key, ctx)
	}
	return &Error{Op: op, Key: key, Err: ErrUnavailable, Cause: err}
}

// acquire takes key's lock in one of four modes (shared, try). Its steps:
// the wait bound (waitBound), the lock statement (lockStatement, which
// computes the server's lock_timeout in lockTimeout) and, on failure, the
// end of the session and the error's classification (lockFailed).
func (l *Locker) acquire(ctx context.Context, op string, key Key, shared, try bool) (_ *Lock, err error) {
	start := time.Now()
	if l.err != nil {
		return nil, l.err
	}
	if !key.Valid() {
		return nil, &Error{Op: op, Key: key, Err: ErrInvalidKey}
	}
	if heldIn(ctx, l, key, shared) {
		return nil, &Error{Op: op, Key: key, Err: ErrAlreadyHeld}
	}
	var sess session // set while this call owns a connection; destroyed on any unforeseen exit (panic)
	defer func() {
		if sess != nil {
			sess.destroy()
		}
		if err != nil {
			l.emit(ctx, observe.Event{Kind: observe.LockAcquire, Key: key.v, Name: key.text, Shared: shared,
				Outcome: outcome(err), Wait: time.Since(start), Err: err})
		}
	}()
	if ctx.Err() != nil {
		return nil, ctxError(op, key, ctx)
	}
	w := l.waitBound(ctx, op, key, start)
	defer w.finish(l)
	if !try && l.noTimeToWait(ctx, &w) {
		return nil, w.timeout(nil) // nothing is sent
	}
	if err := l.verify(w.ctx); err != nil {
		var cw connWaitError
		switch {
		case w.out() && errors.As(err, &cw):
			return nil, l.connTimeout(&w, cw.err)
		case w.out():
			return nil, w.timeout(err)
		}
		return nil, l.wrapVerify(op, key, ctx, err)
	}
	if try && l.mux != nil {
		if lk, err, ok := l.mux.try(ctx, key, shared, &w); ok {
			if err != nil {
				return nil, err
			}
			return l.handOver(ctx, lk, start), nil
		}
		// Every connection of the full shared set carries key: one of
		// its own, where the server decides.
	}
	s, cerr := l.conn(&w)
	if cerr != nil {
		return nil, cerr
	}
	sess = s
	if l.names != nil {
		l.names.record(w.ctx, sess, key, w.end, l.cfg.log)
	}

	args := keyArgs(key)
	granted, cut, err := l.lockStatement(ctx, &sess, key, shared, try, args, &w)
	switch {
	case err == errNoWaitLeft:
		sess.release()
		sess = nil
		return nil, w.timeout(nil)
	case err != nil:
		e := l.lockFailed(ctx, sess, &w, cut, err)
		sess = nil
		return nil, e
	case !granted:
		sess.release()
		sess = nil
		return nil, &Error{Op: op, Key: key, Err: ErrNotAcquired}
	}
	if ctx.Err() != nil {
		// Granted, but the caller has gone: release it rather than hand
		// over a lock nobody waits for.
		l.release(ctx, sess, key, shared, args)
		sess = nil
		return nil, ctxError(op, key, ctx)
	}
	lk := newLock(l, key, shared, sess, args, time.Now())
	// Report before handing over. Should the observer panic, unlock on the
	// server before the panic goes on: closing the connection would free the
	// lock too, but only once the server has noticed, so a TryLock right
	// after the recovered panic could still find it held. The observer
	// never touches the connection, so a normal unlock is sound.
	reported := false
	defer func() {
		if !reported {
			l.release(ctx, sess, key, shared, args)
			sess = nil
		}
	}()
	l.emit(ctx, observe.Event{Kind: observe.LockAcquire, Key: key.v, Name: key.text, Shared: shared,
		Outcome: observe.Acquired, Wait: lk.acquired.Sub(start)})
	reported = true
	sess = nil
	if l.mux == nil || !l.mux.adopt(lk) {
		lk.start()
	}
	return lk, nil
}

// handOver reports lk, granted on a shared connection, and returns it.
// Should the observer panic, lk is released before the panic goes on.
func (l *Locker) handOver(ctx context.Context, lk *Lock, start time.Time) *Lock {
	handed := false
	defer func() {
		if !handed {
			lk.ended.Store(true)
			l.mux.unlock(ctx, lk)
		}
	}()
	l.emit(ctx, observe.Event{Kind: observe.LockAcquire, Key: lk.key.v, Name: lk.key.text, Shared: lk.shared,
		Outcome: observe.Acquired, Wait: lk.acquired.Sub(start)})
	handed = true
	return lk
}

// waitBound is the bound of one acquisition's wait: of the pooled
// connection, the first-use probe and the lock itself.
type waitBound struct {
	op     string
	key    Key
	caller context.Context // the caller's context
	ctx    context.Context // ends at the bound: the caller's, or bc
	bc     *boundCtx       // the Locker's own bound, when it comes first
	end    time.Time
	// byCtx: the caller's deadline, not the Locker's wait timeout, bounds
	// the wait (then a timeout also matches context.DeadlineExceeded).
	byCtx bool
}

// waitBound starts the bound of a wait that started at start: the wait
// timeout, or the caller's deadline when it comes first.
func (l *Locker) waitBound(ctx context.Context, op string, key Key, start time.Time) waitBound {
	w := waitBound{op: op, key: key, caller: ctx, ctx: ctx, end: start.Add(l.cfg.wait)}
	if d, ok := ctx.Deadline(); ok && !d.After(w.end) {
		w.end, w.byCtx = d, true
		return w
	}
	w.bc = l.bounds.start(ctx, w.end)
	w.ctx = w.bc
	return w
}

// finish stops the Locker's own bound, if it set one.
func (w *waitBound) finish(l *Locker) {
	if w.bc != nil {
		l.bounds.finish(w.bc)
	}
}

// out reports whether the wait bound has passed (a timer of the driver's
// can fire just before the context's own).
func (w *waitBound) out() bool { return w.ctx.Err() != nil || !time.Now().Before(w.end) }

// timeout is the error for a wait for the lock that ran out.
func (w *waitBound) timeout(cause error) *Error { return w.timeoutFor(ErrTimeout, cause) }

// timeoutFor is the error for a wait that ran out, waiting for what
// sentinel (ErrTimeout, or an error matching it) says.
func (w *waitBound) timeoutFor(sentinel, cause error) *Error {
	if w.caller.Err() != nil {
		e := ctxError(w.op, w.key, w.caller)
		if e.Err == ErrTimeout {
			e.Err = sentinel
		}
		return e
	}
	if !w.byCtx && errors.Is(cause, context.DeadlineExceeded) {
		cause = nil // the Locker's own bound, not a context's deadline
	}
	if w.byCtx && !errors.Is(cause, context.DeadlineExceeded) {
		if cause == nil {
			cause = context.DeadlineExceeded
		} else {
			cause = fmt.Errorf("%w: %w", context.DeadlineExceeded, cause)
		}
	}
	return &Error{Op: w.op, Key: w.key, Err: sentinel, Cause: cause}
}

// conn takes a connection from the pool for the acquisition that w bounds.
// A wait for it that runs out is ErrConnTimeout, saying so.
func (l *Locker) conn(w *waitBound) (session, *Error) {
	s, err := l.b.conn(w.ctx)
	switch {
	case err == nil:
		return s, nil
	case w.out():
		return nil, l.connTimeout(w, err)
	}
	return nil, &Error{Op: w.op, Key: w.key, Err: ErrUnavailable, Cause: err}
}

// connTimeout is the error for a wait for a connection from the pool that
// ran out: it says whether every connection of the pool was in use.
func (l *Locker) connTimeout(w *waitBound, cause error) *Error {
	what := errkind.New(ErrConnTimeout, "advisory: timed out waiting for a connection from the pool")
	if n := l.b.maxConns(); n > 0 && l.b.connsInUse() >= n {
		what = errkind.New(ErrConnTimeout, "advisory: timed out waiting for a connection from the pool: all %d of its connections are in use", n)
	}
	return w.timeoutFor(what, cause)
}

// noTimeToWait reports whether the caller's deadline leaves a blocking
// lock no time to wait once the holder's work and unlock are kept back
// (waitbound).
func (l *Locker) noTimeToWait(ctx context.Context, w *waitBound) bool {
	d, ok := ctx.Deadline()
	if !ok {
		return false
	}
	b, _ := l.est.Bound(time.Now(), time.Until(w.end), d, true)
	return b < time.Millisecond
}

// errNoWaitLeft: lockStatement found under a millisecond left to wait and
// sent nothing.
var errNoWaitLeft = errors.New("advisory: no time left to wait")

// lockStatement sends the lock statement on sess: a try-once, or a
// blocking lock whose wait the server's lock_timeout ends. It returns
// whether the lock was granted and, for lockFailed, whether the client cut
// the statement (its outcome then unknown). sess may come back replaced:
// see noPool.
func (l *Locker) lockStatement(ctx context.Context, sess *session, key Key, shared, try bool, args []any, w *waitBound) (granted, cut bool, err error) {
	if try {
		// Bounded by the wait bound; the caller's ctx is the driver's to
		// watch.
		err = (*sess).queryRow(ctx, w.end, tryLockSQL[b2i(shared)][b2i(key.IsPair())], args, &granted)
		return granted, err != nil && (ctx.Err() != nil || !time.Now().Before(w.end)), err
	}
	ms := l.lockTimeout(ctx, w)
	if ms == 0 {
		return false, false, errNoWaitLeft
	}
	// The server's lock_timeout ends the wait before the caller's deadline
	// (a 55P03 keeps the connection, where a statement cut by the context
	// costs it), so the deadline does not cut the statement; a
	// cancellation ends it with a cancel request (session.wait), or on
	// drivers without one cuts it. stmtEnd, a grace period past the wait
	// bound, cuts it too, for a server that does not answer.
	lctx := ctx
	if hasDeadline(ctx) {
		var detached func()
		lctx, detached = untilCancelled(ctx)
		defer detached()
	}
	stmtEnd := w.end.Add(lockTimeoutGrace)
	requested, err := (*sess).wait(lctx, stmtEnd, l.cfg.unlockTimeout, blockingLockSQL(key, shared, ms))
	if requested && pgerror.Code(err) != pgerror.QueryCanceled {
		// The statement ended before the request reached it, which a
		// pooler may still deliver to the connection's next user.
		*sess = noPool{*sess}
	}
	cut = err != nil && (!time.Now().Before(stmtEnd) || !requested && lctx.Err() != nil)
	return err == nil, cut, err
}

// noPool is a session that is never returned to the pool: release
// destroys it, once whatever it held has been released on the server.
type noPool struct{ session }

func (s noPool) release() { s.session.destroy() }

// lockTimeout is a blocking lock's lock_timeout in whole milliseconds,
// rounded up: the time left to the wait bound or, under a caller's
// deadline, what waitbound leaves for the wait after keeping back time for
// the holder's work and unlock (which then bounds the wait: w.byCtx). It is
// 0 when under a millisecond is left, as lock_timeout = 0 would mean
// forever.
func (l *Locker) lockTimeout(ctx context.Context, w *waitBound) int64 {
	remaining := time.Until(w.end)
	if d, ok := ctx.Deadline(); ok {
		var byDeadline bool
		remaining, byDeadline = l.est.Bound(time.Now(), remaining, d, true)
		w.byCtx = w.byCtx || byDeadline
	}
	if remaining < time.Millisecond {
		return 0
	}
	return int64((remaining + time.Millisecond - 1) / time.Millisecond)
}

// lockFailed ends sess after its lock statement failed with err, and
// classifies err.
//
// A server error with the caller still waiting for us leaves the
// connection usable; but the lock may have been granted just as the
// timeout fired (the 55P03 race), so the session is swept before it goes
// back to the pool. It holds nothing else of ours: one lock per
// connection. Anything else (a context ended mid-call, the network) leaves
// the outcome unknown: the connection is destroyed, which ends the session
// and any lock in it; so does a server error on a statement the client
// cut (cut), which lockStatement works out. A wait ended by a cancel
// request answers 57014 on a sound connection, which is swept.
func (l *Locker) lockFailed(ctx context.Context, sess session, w *waitBound, cut bool, err error) *Error {
	code := pgerror.Code(err)
	if code != "" && !pgerror.ConnectionLost(err) && !cut {
		l.sweep(ctx, sess)
	} else {
		sess.destroy()
	}
	switch {
	case code == pgerror.LockNotAvailable:
		return w.timeout(err)
	case code == pgerror.DeadlockDetected:
		return &Error{Op: w.op, Key: w.key, Err: ErrDeadlock, Cause: err}
	case ctx.Err() != nil:
		return ctxError(w.op, w.key, ctx)
	case cut || w.out() && !pgerror.ConnectionLost(err):
		return w.timeout(err)
	case pgerror.ConnectionLost(err):
		return &Error{Op: w.op, Key: w.key, Err: ErrUnavailable, Cause: err}
	}
	return &Error{Op: w.op, Key: w.key, Cause: err}
}

// sweep releases every session-level advisory lock of sess and returns it
// to the pool, or destroys it if that fails.
func (l *Locker) sweep(ctx context.Context, sess session) {
	sent := time.Now()
	if err := sess.exec(context.WithoutCancel(ctx), sent.Add(l.cfg.unlockTimeout), unlockAllSQL); err != nil {
		l.cfg.log.Warn("advisory: connection closed: sweep after a failed lock failed", "error", err)
		sess.destroy()
		return
	}
	l.est.ObserveRTT(time.Since(sent))
	sess.release()
}

// untilCancelled returns a context that ends when ctx is cancelled, but
// not when ctx's deadline passes, and the function that releases it.
func untilCancelled(ctx context.Context) (context.Context, func()) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return c, func() {
		stop()
		cancel()
	}
}

func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}

// release unlocks key on sess and returns it to the pool, or destroys it
// when the unlock is not confirmed.
func (l *Locker) release(ctx context.Context, sess session, key Key, shared bool, args []any) error {
	var ok bool
	done := false
	defer func() {
		if !done {
			sess.destroy()
		}
	}()
	sent := time.Now()
	err := sess.queryRow(context.WithoutCancel(ctx), sent.Add(l.cfg.unlockTimeout),
		unlockSQL[b2i(shared)][b2i(key.IsPair())], args, &ok)
	done = true
	if err == nil && ok {
		l.est.ObserveRTT(time.Since(sent))
		sess.release()
		return nil
	}
	sess.destroy()
	if err == nil {
		err = errors.New("pg_advisory_unlock returned false: the session did not hold the lock")
	}
	l.cfg.log.Warn("advisory: connection closed: unlock not confirmed", "key", key.String(), "error", err)
	return err
}

// heldIn reports whether ctx carries a hold that key, asked for from l in
// mode shared, would wait for: the same key from this Locker (any mode; see
// ErrAlreadyHeld), or a conflicting mode through the same pool, whoever took
// it (another Locker, a txlock transaction).
func heldIn(ctx context.Context, l *Locker, key Key, shared bool) bool {
	tag := tagOf(key)
	if _, ok := heldkeys.Conflict(ctx, l.b.handle(), []heldkeys.Tag{tag}, shared); ok {
		return true
	}
	own := false
	heldkeys.Each(ctx, func(h *heldkeys.Hold) bool {
		own = h.Owner == l && slices.Contains(h.Tags, tag)
		return !own
	})
	return own
}

// tagOf is k's identity in pg_locks.
func tagOf(k Key) heldkeys.Tag {
	c, o, s := k.Locktag()
	return heldkeys.Tag{ClassID: c, ObjID: o, ObjSubID: s}
}
