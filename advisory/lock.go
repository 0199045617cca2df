package advisory

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlock/sqlock/internal/heldkeys"
	"github.com/sqlock/sqlock/observe"
)

// Lock is a held session-level advisory lock. It owns one pinned
// connection until Release (with [WithMultiplexing], it may share one with
// other locks), and watches it: Lost is closed if the connection dies. Its
// methods are safe for concurrent use.
type Lock struct {
	l        *Locker
	key      Key
	shared   bool
	acquired time.Time

	// sess is used by one goroutine at a time: a keepalive check, or
	// Release once it has stopped the checks and waited for a running one (a
	// pinned connection is not safe for concurrent use). nil once
	// destroyed.
	sess  session
	mc    *muxConn // its shared connection (WithMultiplexing), whose check stands for the lock's; then sess is nil
	pid   int32    // backend pid seen by the first check; the checks' own
	sched schedule // its keepalive checks; stopped when Release begins or the lock is lost

	args []any // the key's bind parameters

	lostMu  sync.Mutex
	lostErr error                   // an *Error matching ErrLost, once lost
	lostCtx context.Context         // made on first use; cancelled with lostErr
	lose    context.CancelCauseFunc // cancels lostCtx

	mu    sync.Mutex // serialises Release
	ended atomic.Bool
}

func newLock(l *Locker, key Key, shared bool, sess session, args []any, acquired time.Time) *Lock {
	return &Lock{l: l, key: key, shared: shared, sess: sess, args: args, acquired: acquired}
}

// lostContext is cancelled with lostErr when the lock is lost. It is made
// only when someone watches (Lost, Context): most holds never need it.
func (lk *Lock) lostContext() context.Context {
	lk.lostMu.Lock()
	defer lk.lostMu.Unlock()
	if lk.lostCtx == nil {
		lk.lostCtx, lk.lose = context.WithCancelCause(context.Background())
		if lk.lostErr != nil {
			lk.lose(lk.lostErr)
		}
	}
	return lk.lostCtx
}

// start hands the lock to its Locker's keeper for keepalive checks.
func (lk *Lock) start() {
	lk.sched.setNext(lk.acquired.Add(lk.l.cfg.keepalive)) // before the keeper can see lk
	lk.l.keeper.add(lk)
}

// checkIfDue starts a check if one is due and none runs (called by the
// keeper's tick).
func (lk *Lock) checkIfDue(now time.Time) {
	if lk.sched.begin(now) {
		go lk.check()
	}
}

// stopChecks ends the keepalive and waits for a check in progress, after
// which the caller alone uses the connection.
func (lk *Lock) stopChecks() {
	lk.sched.stop()
	lk.l.keeper.remove(lk)
	lk.sched.wait()
}

// Key is the lock's key.
func (lk *Lock) Key() Key { return lk.key }

// Shared reports whether the lock is held in shared mode.
func (lk *Lock) Shared() bool { return lk.shared }

// Lost returns a channel that is closed when the lock is lost: its
// connection died (seen by the keepalive within 1¼ intervals), the server
// moved the session, or an unlock could not be confirmed. A successful
// Release never closes it.
func (lk *Lock) Lost() <-chan struct{} { return lk.lostContext().Done() }

// Err is nil while the lock has not been lost, and then an error matching
// ErrLost that says why.
func (lk *Lock) Err() error {
	lk.lostMu.Lock()
	defer lk.lostMu.Unlock()
	return lk.lostErr
}

// Context returns a context derived from parent that ends when the lock is
// lost (its cause then matches ErrLost) or cancel is called, and that
// carries the hold: taking the same key from the same Locker with it (or a
// context derived from it), or asking for it in a conflicting mode through
// the same pool (another Locker, a txlock transaction), returns
// ErrAlreadyHeld instead of waiting on itself. Do passes such a context to its function. Call cancel when done.
func (lk *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	lost := lk.lostContext()
	stop := context.AfterFunc(lost, func() { cancel(context.Cause(lost)) })
	ctx = heldkeys.With(ctx, &heldkeys.Hold{Handle: lk.l.b.handle(), Tags: []heldkeys.Tag{tagOf(lk.key)},
		Shared: lk.shared, Ended: lk.ended.Load, Owner: lk.l})
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// markLost records the loss once: closes Lost, reports it.
func (lk *Lock) markLost(cause error) {
	lk.lostMu.Lock()
	if lk.lostErr != nil {
		lk.lostMu.Unlock()
		return
	}
	err := &Error{Op: "hold", Key: lk.key, Err: ErrLost, Cause: cause}
	lk.lostErr = err
	if lk.lose != nil {
		lk.lose(err)
	}
	lk.lostMu.Unlock()
	hold := time.Since(lk.acquired)
	lk.l.cfg.log.Warn("advisory: lock lost", "key", lk.key.String(), "shared", lk.shared,
		"hold", hold, "error", cause)
	lk.l.emit(context.Background(), observe.Event{Kind: observe.LockRelease, Key: lk.key.v, Name: lk.key.text,
		Shared: lk.shared, Outcome: observe.Lost, Hold: hold, Err: err})
}

// pingTimeout bounds one keepalive check: one interval, but never less
// than a second, so that a very short interval on a busy server does not
// turn a slow answer into a loss (which would end the session, and so
// the lock, for real).
func pingTimeout(interval time.Duration) time.Duration {
	return max(interval, time.Second)
}

// check is one keepalive check, started by the keeper: it pings the
// connection, or on failure destroys the connection and reports the loss.
// A connection that failed visibly (reset, closed, backend terminated) is
// reported by the next check, within 1¼ intervals; one that stops
// answering, when a check has had no answer for pingTimeout.
func (lk *Lock) check() {
	var next time.Time // when the next check is due; zero: none (the lock is lost)
	defer func() { lk.sched.end(next) }()
	interval := lk.l.cfg.keepalive
	var pid int32
	sent := time.Now()
	err := lk.sess.queryRow(context.Background(), sent.Add(pingTimeout(interval)), pingSQL, nil, &pid)
	if err == nil {
		lk.l.est.ObserveRTT(time.Since(sent))
	}
	if err == nil && lk.pid != 0 && pid != lk.pid {
		err = fmt.Errorf("the connection's server backend changed from pid %d to %d: a pooler moved the session", lk.pid, pid)
	}
	if err != nil {
		lk.sess.destroy()
		lk.sess = nil
		lk.sched.stop()
		lk.l.keeper.remove(lk)
		lk.markLost(err)
		return
	}
	lk.pid = pid
	next = time.Now().Add(interval)
}

// Release gives the lock up and returns its connection to the pool, or, if
// the release is not confirmed (pg_advisory_unlock did not return true in
// time), closes the connection, which ends the session and so the lock. It
// runs on a context detached from ctx's cancellation (a cancelled request
// context still releases), bounded by [WithReleaseTimeout]. It returns nil
// after a confirmed release, an error matching ErrLost if the lock had been
// lost or the release was not confirmed, and ErrNotHeld if Release already
// ran.
func (lk *Lock) Release(ctx context.Context) error {
	if lk == nil {
		return &Error{Op: "release", Err: ErrNotHeld}
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.ended.Load() {
		return &Error{Op: "release", Key: lk.key, Err: ErrNotHeld}
	}
	lk.ended.Store(true)
	if lk.mc != nil {
		if err := lk.l.mux.unlock(ctx, lk); err != nil {
			return &Error{Op: "release", Key: lk.key, Err: ErrLost, Cause: err}
		}
		lk.released(ctx)
		return nil
	}
	lk.stopChecks() // from here on this goroutine alone uses the connection
	sess := lk.sess
	lk.sess = nil
	if sess == nil { // a keepalive check found it lost
		var cause error
		if e, ok := lk.Err().(*Error); ok {
			cause = e.Cause
		}
		return &Error{Op: "release", Key: lk.key, Err: ErrLost, Cause: cause}
	}
	if err := lk.l.release(ctx, sess, lk.key, lk.shared, lk.args); err != nil {
		lk.markLost(err)
		return &Error{Op: "release", Key: lk.key, Err: ErrLost, Cause: err}
	}
	lk.released(ctx)
	return nil
}

// released records a confirmed release.
func (lk *Lock) released(ctx context.Context) {
	hold := time.Since(lk.acquired)
	lk.l.est.ObserveHold(hold)
	lk.l.emit(ctx, observe.Event{Kind: observe.LockRelease, Key: lk.key.v, Name: lk.key.text, Shared: lk.shared,
		Outcome: observe.Released, Hold: hold})
}
