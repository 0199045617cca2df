package lockedtx

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/txbatch"
	"github.com/sqlock/sqlock/internal/waitbound"
)

// Attempt is one run of the transaction, handed to a BeginFunc.
type Attempt struct {
	n    int
	plan *plan
	cfg  *Config
	ctx  context.Context // the caller's

	// The lock wait's bound for this attempt (see bind): the configured
	// timeout, or, when the caller's deadline comes first, the time to it
	// less what the rest of the transaction needs (byDeadline).
	timeout    time.Duration
	byDeadline bool
	// est is the estimates of the connection the attempt runs on, when the
	// caller's context has a deadline and the connection is a pgx one; nil
	// otherwise (the bound then keeps a cold reserve back).
	est *waitbound.Estimates
	// fold is the state of the request to fold the locks into a
	// database/sql BEGIN (see foldRequest in fold.go).
	fold txbatch.Fold
	// tc is the attempt's transaction context (nil for an attempt Run did
	// not start).
	tc *txContext
}

// runsOn records c as the connection the attempt's statements run on, for
// the cancel requests a cancellation of the caller's context sends (see
// txContext.follow). It fails when that cancellation has already come:
// then nothing may be sent.
func (a *Attempt) runsOn(c *pgx.Conn) error {
	if a.tc == nil || a.ctx.Done() == nil {
		return nil
	}
	a.tc.mu.Lock()
	defer a.tc.mu.Unlock()
	if a.tc.interrupted {
		return a.ctx.Err()
	}
	a.tc.conn = c
	return nil
}

// settle ends the step in flight on the attempt's connection before the
// connection goes back to its pool: no cancel request is left in flight to
// reach its next user (see txContext.settle).
func (a *Attempt) settle() {
	if a.tc != nil {
		a.tc.settle()
	}
}

// Number is the 1-based attempt number.
func (a *Attempt) Number() int { return a.n }

// useConn records the estimates of the pgx connection the attempt runs
// on, when the caller's context has a deadline (only then are they used,
// and kept up to date).
func (a *Attempt) useConn(c *pgx.Conn) {
	if _, ok := a.ctx.Deadline(); ok && !a.plan.tryOnce {
		a.est = &txbatch.StateOf(c).Est
	}
}

// begunAlone records the round trip of a BEGIN that carried no lock (it
// waits for nothing), sent at sent, for the lock wait that follows it: into
// the connection's estimates when kept (see useConn), else into the
// attempt's own (drivers other than pgx's keep none per connection), so
// that over a slow network even that wait keeps 3.5 round trips back, not
// only the cold reserve (waitbound.Estimates.Reserve).
func (a *Attempt) begunAlone(sent time.Time) {
	if _, ok := a.ctx.Deadline(); !ok || a.plan.tryOnce {
		return
	}
	rtt := time.Since(sent)
	if a.est == nil {
		a.est = new(waitbound.Estimates)
	}
	a.est.ObserveRTT(rtt)
}

// bind fixes the attempt's lock wait bound just before the lock statements
// are sent: the configured timeout, or the time to the caller's deadline
// less the reserve (waitbound) when that is shorter. It reports false when
// no time is left to wait; the bound is then 1 ms, the least lock_timeout
// there is.
func (a *Attempt) bind() bool {
	a.timeout, a.byDeadline = a.plan.timeout, false
	if a.plan.tryOnce {
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

// queries is the bound lock statements of the attempt (bind fixed its
// lock_timeout): the plan's own, or, for a bound the caller's deadline
// set, a copy whose first statement carries it.
func (a *Attempt) queries() []lockQuery {
	p := a.plan
	if a.timeout == p.timeout || p.timeout <= 0 {
		return p.queries
	}
	qs := slices.Clone(p.queries)
	qs[0].args = slices.Clone(qs[0].args)
	qs[0].args[0] = timeoutArg(a.timeout)
	return qs
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
