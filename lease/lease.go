package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqlock/sqlock"
)

// marginDivisor sets the safety margin: a lease is trusted locally until
// ttl − ttl/marginDivisor after its last acquiring or renewing request was
// sent. It covers a client clock that runs slow against the server's and
// the time the holder needs to stop.
const marginDivisor = 10

// releaseTimeout bounds Release's statement, which runs detached from the
// caller's cancellation.
const releaseTimeout = 3 * time.Second

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	m        *Manager
	name     string
	owner    string
	token    int64
	ttl      time.Duration
	acquired time.Time // when the acquiring request was sent
	capEnd   time.Time // acquired + the Manager's maximum hold, or zero

	mu         sync.Mutex
	validUntil time.Time // local monotonic deadline; Lost fires at it
	lastErr    error     // the last failed renewal's error
	lostErr    error
	released   bool
	timer      *time.Timer

	lostCtx context.Context // cancelled with lostErr
	lose    context.CancelCauseFunc

	// The heartbeat is a timer whose function renews, so that no goroutine
	// exists between renewals (and none at all for a lease released before
	// its first renewal is due).
	beat     *time.Timer
	beating  chan struct{}      // closed when the running renewal ends; nil if none runs
	beatCtx  context.Context    // cancelled by Release: ends a renewal in flight
	stopBeat context.CancelFunc //

	relMu sync.Mutex // serialises Release
}

func (m *Manager) newLease(name, owner string, token int64, ttl time.Duration, sent time.Time) *Lease {
	l := &Lease{m: m, name: name, owner: owner, token: token, ttl: ttl, acquired: sent}
	if m.cfg.maxHold > 0 {
		l.capEnd = sent.Add(m.cfg.maxHold)
	}
	l.lostCtx, l.lose = context.WithCancelCause(context.Background())
	l.beatCtx, l.stopBeat = context.WithCancel(context.Background())
	l.mu.Lock() // the timers' functions may run before AfterFunc returns
	l.validUntil = l.until(sent)
	l.timer = time.AfterFunc(time.Until(l.validUntil), l.expire)
	l.beat = time.AfterFunc(time.Until(sent.Add(l.ttl/3)), l.heartbeat)
	l.mu.Unlock()
	return l
}

// until is the local deadline of a request sent at sent that the server
// granted: the server's expiry is at least ttl after it received the
// request, which was after sent.
func (l *Lease) until(sent time.Time) time.Time {
	t := sent.Add(l.ttl - l.ttl/marginDivisor)
	if !l.capEnd.IsZero() && t.After(l.capEnd) {
		t = l.capEnd
	}
	return t
}

// Name is the lease's name.
func (l *Lease) Name() string { return l.name }

// Token is the lease's fencing token: greater than that of every earlier
// holder of any lease in the table, in every process, across server
// restarts and deletions of the row. Write it beside the data the lease
// protects and refuse writes that carry a smaller one.
func (l *Lease) Token() int64 { return l.token }

// Deadline is the local time until which the lease is trusted: the last
// confirmed renewal's send time plus the TTL, less a safety margin of a
// tenth of the TTL (and never past the Manager's maximum hold). Lost fires
// then unless a renewal moves it.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Lost returns a channel that is closed when the lease can no longer be
// trusted: a renewal was refused by the server (the lease is someone
// else's), no renewal was confirmed before [Lease.Deadline], or the
// maximum hold time was reached. It fires before the server lets anyone
// else in, by the safety margin. A Release never closes it.
func (l *Lease) Lost() <-chan struct{} {
	l.checkDeadline()
	return l.lostCtx.Done()
}

// checkDeadline reports the loss now if the local deadline has passed and
// its timer has not run yet (a process resumed after a pause sees the
// loss before anything else, whatever order its goroutines run in).
func (l *Lease) checkDeadline() {
	l.mu.Lock()
	due := l.lostErr == nil && !l.released && !time.Now().Before(l.validUntil)
	l.mu.Unlock()
	if due {
		l.expire()
	}
}

// Err is nil while the lease is trusted, and then an error matching
// [ErrLost] that says why.
func (l *Lease) Err() error {
	l.checkDeadline()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// Context returns a context derived from parent that ends when the lease
// is lost (its cause then matches [ErrLost]) or cancel is called, and that
// carries the lease's fencing token ([sqlock.WithFencingToken]): the fenced
// writes of versioned, sqlxhelpers and gormplugin made with it are refused
// by the database once a newer holder has written. Call cancel when done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	l.checkDeadline()
	ctx, cancel := context.WithCancelCause(sqlock.WithFencingToken(parent, l.token))
	if l.lostCtx.Err() != nil { // already lost: ended before it is returned
		cancel(context.Cause(l.lostCtx))
	}
	stop := context.AfterFunc(l.lostCtx, func() { cancel(context.Cause(l.lostCtx)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// markLost records the loss once, unless the lease was released.
func (l *Lease) markLost(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil || l.released {
		return
	}
	l.lostErr = &Error{Op: "hold", Name: l.name, Err: ErrLost, Cause: cause}
	l.timer.Stop()
	l.beat.Stop()
	l.lose(l.lostErr)
}

// expire is the timer at the local deadline.
func (l *Lease) expire() {
	l.mu.Lock()
	if time.Now().Before(l.validUntil) { // a renewal moved it as the timer fired
		l.timer.Reset(time.Until(l.validUntil))
		l.mu.Unlock()
		return
	}
	var cause error
	if !l.capEnd.IsZero() && !l.validUntil.Before(l.capEnd) {
		cause = fmt.Errorf("held for the maximum hold time %v", l.m.cfg.maxHold)
	} else {
		cause = fmt.Errorf("no renewal confirmed in time (TTL %v, safety margin %v)", l.ttl, l.ttl/marginDivisor)
		if l.lastErr != nil {
			cause = fmt.Errorf("%w; last renewal error: %w", cause, l.lastErr)
		}
	}
	l.mu.Unlock()
	l.markLost(cause)
}

// extend records a renewal sent at sent and confirmed.
func (l *Lease) extend(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil || l.released {
		return
	}
	if u := l.until(sent); u.After(l.validUntil) {
		l.validUntil = u
		l.timer.Reset(time.Until(u))
	}
	l.lastErr = nil
}

func (l *Lease) state() (validUntil time.Time, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil, l.lostErr != nil
}

// Renewal retries: a transient failure is tried again after a pause that
// doubles from retryMin to retryMax, while the lease is still trusted.
const (
	retryMin = 5 * time.Millisecond
	retryMax = 250 * time.Millisecond
)

// heartbeat is the renewal timer's function: it renews (retrying
// transient failures) and sets the timer for the next renewal, ttl/3 after
// this one was sent.
func (l *Lease) heartbeat() {
	l.mu.Lock()
	if l.released || l.lostErr != nil {
		l.mu.Unlock()
		return
	}
	done := make(chan struct{})
	l.beating = done
	capped := !l.capEnd.IsZero() && !l.validUntil.Before(l.capEnd)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.beating = nil
		l.mu.Unlock()
		close(done)
	}()
	if capped {
		return // the cap is reached: Lost fires at validUntil
	}
	sent, ok := l.renew(l.beatCtx)
	if !ok {
		return
	}
	l.mu.Lock()
	if !l.released && l.lostErr == nil {
		l.beat.Reset(time.Until(sent.Add(l.ttl / 3)))
	}
	l.mu.Unlock()
}

// renew renews once, retrying transient failures while the lease is
// trusted. ok is false when the heartbeat should end.
func (l *Lease) renew(ctx context.Context) (sent time.Time, ok bool) {
	pause := retryMin
	for {
		validUntil, lost := l.state()
		if lost || !time.Now().Before(validUntil) {
			return sent, false // the timer reports the loss
		}
		rctx, cancel := context.WithDeadline(ctx, validUntil)
		sent = time.Now()
		var token int64
		err := l.m.b.queryRow(rctx, l.m.stmt.renew, []any{l.name, l.owner, l.ttl.Microseconds()}, &token)
		cancel()
		if ctx.Err() != nil {
			return sent, false // released
		}
		switch {
		case err == nil:
			l.m.observeRTT(time.Since(sent))
			l.extend(sent)
			return sent, true
		case errors.Is(err, errNoRows):
			l.markLost(errors.New("the server no longer has the lease as this holder's (expired or taken over)"))
			return sent, false
		case permanent(err):
			l.markLost(err)
			return sent, false
		}
		l.mu.Lock()
		l.lastErr = err
		l.mu.Unlock()
		if !l.sleepUntil(ctx, time.Now().Add(pause)) {
			return sent, false
		}
		pause = min(2*pause, retryMax)
	}
}

// sleepUntil waits until t; false if the heartbeat must end first
// (Release, or the lease was lost).
func (l *Lease) sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	case <-l.lostCtx.Done():
		return false
	}
}

// Release ends the lease on the server (owner-checked: only if it is still
// this holder's) and wakes waiters. It stops the renewals first, and runs
// detached from ctx's cancellation with a bound of its own, so a cancelled
// request still releases. It returns nil if the server confirmed the
// release; an error matching [ErrNotHeld] if the lease had expired or been
// taken over (nothing was changed) or Release already ran (nothing was
// sent); otherwise the database's error (the lease then expires by its
// TTL).
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return &Error{Op: "release", Err: ErrNotHeld, Cause: errors.New("nil lease")}
	}
	l.relMu.Lock()
	defer l.relMu.Unlock()
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return &Error{Op: "release", Name: l.name, Err: ErrNotHeld, Cause: errors.New("already released")}
	}
	l.released = true
	l.timer.Stop()
	l.beat.Stop()
	beating := l.beating
	l.mu.Unlock()
	// A renewal in flight is cancelled, and waited for after the release
	// is sent: if it reaches the server after the release it matches no
	// row, which changes nothing.
	l.stopBeat()
	if beating != nil {
		defer func() { <-beating }()
	}
	if ctx == nil {
		ctx = context.Background()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var one int
	err := l.m.b.queryRow(rctx, l.m.stmt.release, []any{l.name, l.owner}, &one)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNoRows):
		return &Error{Op: "release", Name: l.name, Err: ErrNotHeld,
			Cause: errors.New("the server no longer has the lease as this holder's (expired or taken over); nothing changed")}
	default:
		return &Error{Op: "release", Name: l.name, Cause: err}
	}
}
