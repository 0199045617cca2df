// Package ttllock is the toolkit of the locks that expire unless renewed
// (package lease's leases, package redislock's locks, and the backends to
// come). A backend describes itself in a [Package] (its name, system,
// sentinels, error type and trust margin), embeds a [Base] in its Manager
// or Locker and a [Lock] in its lock type, and supplies a [Store]: one
// attempt to grant, and for a granted lock ([Held]) a renewal and a
// release, each owner-checked, the attempt returning a token where the
// backend mints one. [Acquire] does the rest: the input check's frame,
// the wait's bound ([BoundWait], [WaitEnd]), the attempts and pauses, the
// errors, the observer's events, and the [Hold] — the local deadline at
// which Lost fires, the renewal every TTL/3 that retries transient
// failures while the lock is still trusted, the maximum hold, Release.
// [Config] holds the options every such package has, with one meaning;
// [Acquirer] adapts a package to sqlock.Acquirer.
//
// A Hold can also be driven directly through its own [Backend] (Start),
// for a backend whose acquisition does not fit a Store.
package ttllock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/lazytimer"
	"github.com/sqlock/sqlock/observe"
)

// ReleaseTimeout bounds a Release's request, which runs detached from the
// caller's cancellation.
const ReleaseTimeout = 3 * time.Second

// ErrReleased is returned by [Hold.Release] when Release already ran;
// nothing was sent.
var ErrReleased = errors.New("already released")

// Backend is what a hold needs from the server or servers holding the lock.
type Backend interface {
	// Renew extends the lock once, by its TTL from when the server sees
	// the request. refused: the server no longer has the lock as this
	// holder's (err then says why, and the hold is lost); otherwise a
	// non-nil err is transient and the renewal is tried again.
	Renew(ctx context.Context) (refused bool, err error)
	// Release ends the lock on the server and returns the package's error
	// for the caller (nil if the server confirmed).
	Release(ctx context.Context) error
	// LostError is the package's error for a loss with the given cause:
	// what Err returns and Context's cause.
	LostError(cause error) error
}

// Spec is what differs between holds besides the backend.
type Spec struct {
	TTL time.Duration
	// Margin: a lock granted or renewed by a request sent at t is trusted
	// until t + TTL − Margin; MarginName names it in the loss's error.
	Margin     time.Duration
	MarginName string
	// MaxHold, if positive, ends the trust that long after the acquiring
	// request was sent, however often it was renewed.
	MaxHold time.Duration
	// A transient renewal failure is tried again after a pause that doubles
	// from RetryMin to RetryMax.
	RetryMin, RetryMax time.Duration
	// Observer, if not nil, receives a LockRelease event when the hold ends
	// (Released, or Lost) and a Retry event (cause "renew") for each
	// transient renewal failure; Event gives their Source, Key and Name.
	Observer observe.Observer
	Event    observe.Event
	// Timers, if not nil, holds the deadline and renewal timers: the
	// holds of one Manager or Locker share it, so that taking a lock does
	// not arm a runtime timer of its own (see package lazytimer). Nil: the
	// hold's own.
	Timers *lazytimer.Queue
}

// Hold is a held lock's state. Start it; its methods are then safe for
// concurrent use.
type Hold struct {
	b       Backend
	spec    Spec
	started time.Time // when the acquiring request was sent
	capEnd  time.Time // started + MaxHold, or zero

	mu         sync.Mutex
	validUntil time.Time // local monotonic deadline; Lost fires at it
	lastErr    error     // the last failed renewal's error
	lostErr    error
	released   bool
	timer      *lazytimer.Timer // at validUntil

	// The renewal is a timer whose function renews, so that no goroutine
	// exists between renewals (and none at all for a lock released before
	// its first renewal is due).
	beat     *lazytimer.Timer
	beating  chan struct{}      // closed when the running renewal ends; nil if none runs
	beatCtx  context.Context    // cancelled by Release: ends a renewal in flight
	stopBeat context.CancelFunc //

	lostCtx context.Context // cancelled with lostErr
	lose    context.CancelCauseFunc

	relMu sync.Mutex // serialises Release
}

// Start arms h for a lock granted by a request sent at sent, after
// reporting the acquisition (begun at began) to spec.Observer. The report
// comes first, as the lock is not yet anyone's: should the observer panic
// (or call runtime.Goexit), the lock is released on the server, with no
// timer armed and so no renewal to follow, before the panic goes on —
// otherwise nobody could release it, and it would be renewed for ever.
func (h *Hold) Start(ctx context.Context, b Backend, spec Spec, began, sent time.Time) {
	h.b, h.spec, h.started = b, spec, sent
	if spec.MaxHold > 0 {
		h.capEnd = sent.Add(spec.MaxHold)
	}
	if spec.Observer != nil {
		h.reportAcquired(ctx, began)
	}
	h.lostCtx, h.lose = context.WithCancelCause(context.Background())
	h.beatCtx, h.stopBeat = context.WithCancel(context.Background())
	h.mu.Lock() // the timers' functions may run before AfterFunc returns
	h.validUntil = h.until(sent)
	timers := spec.Timers
	if timers == nil {
		timers = new(lazytimer.Queue)
	}
	h.timer = timers.AfterFunc(time.Until(h.validUntil), h.expire)
	h.beat = timers.AfterFunc(time.Until(sent.Add(spec.TTL/3)), h.renewal)
	h.mu.Unlock()
}

// until is the local deadline of a request sent at sent that the server
// granted: the server's expiry is at least TTL after it received the
// request, which was after sent.
func (h *Hold) until(sent time.Time) time.Time {
	t := sent.Add(h.spec.TTL - h.spec.Margin)
	if !h.capEnd.IsZero() && t.After(h.capEnd) {
		t = h.capEnd
	}
	return t
}

// TTL is the lock's TTL.
func (h *Hold) TTL() time.Duration { return h.spec.TTL }

// Deadline is the local time until which the lock is trusted.
func (h *Hold) Deadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// Lost returns a channel closed when the lock can no longer be trusted.
// A Release never closes it.
func (h *Hold) Lost() <-chan struct{} {
	h.checkDeadline()
	return h.lostCtx.Done()
}

// Err is nil while the lock is trusted, and then the backend's LostError.
func (h *Hold) Err() error {
	h.checkDeadline()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostErr
}

// Status reports whether Release ran and the loss, if any, after checking
// the deadline.
func (h *Hold) Status() (released bool, lost error) {
	h.checkDeadline()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.released, h.lostErr
}

// Context returns a context derived from parent that ends when the lock is
// lost (with the loss as its cause) or cancel is called.
func (h *Hold) Context(parent context.Context) (context.Context, context.CancelFunc) {
	h.checkDeadline()
	ctx, cancel := context.WithCancelCause(parent)
	if h.lostCtx.Err() != nil { // already lost: ended before it is returned
		cancel(context.Cause(h.lostCtx))
	}
	stop := context.AfterFunc(h.lostCtx, func() { cancel(context.Cause(h.lostCtx)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// checkDeadline reports the loss now if the local deadline has passed and
// its timer has not run yet (a process resumed after a pause sees the loss
// before anything else, whatever order its goroutines run in).
func (h *Hold) checkDeadline() {
	h.mu.Lock()
	due := h.lostErr == nil && !h.released && !time.Now().Before(h.validUntil)
	h.mu.Unlock()
	if due {
		h.expire()
	}
}

// MarkLost records the loss once, unless the lock was released.
func (h *Hold) MarkLost(cause error) {
	h.mu.Lock()
	if h.lostErr != nil || h.released {
		h.mu.Unlock()
		return
	}
	h.lostErr = h.b.LostError(cause)
	h.timer.Stop()
	h.beat.Stop()
	h.lose(h.lostErr)
	err := h.lostErr
	h.mu.Unlock()
	h.emitEnd(context.Background(), observe.Lost, err)
}

// expire is the timer at the local deadline.
func (h *Hold) expire() {
	h.mu.Lock()
	if time.Now().Before(h.validUntil) { // a renewal moved it as the timer fired
		h.timer.Reset(time.Until(h.validUntil))
		h.mu.Unlock()
		return
	}
	var cause error
	if !h.capEnd.IsZero() && !h.validUntil.Before(h.capEnd) {
		cause = fmt.Errorf("held for the maximum hold time %v", h.spec.MaxHold)
	} else {
		cause = fmt.Errorf("no renewal confirmed in time (TTL %v, %s %v)", h.spec.TTL, h.spec.MarginName, h.spec.Margin)
		if h.lastErr != nil {
			cause = fmt.Errorf("%w; last renewal error: %w", cause, h.lastErr)
		}
	}
	h.mu.Unlock()
	h.MarkLost(cause)
}

// extend records a renewal sent at sent and confirmed.
func (h *Hold) extend(sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lostErr != nil || h.released {
		return
	}
	if u := h.until(sent); u.After(h.validUntil) {
		h.validUntil = u
		h.timer.Reset(time.Until(u))
	}
	h.lastErr = nil
}

func (h *Hold) state() (validUntil time.Time, lost bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil, h.lostErr != nil
}

// renewal is the renewal timer's function: it renews (retrying transient
// failures) and sets the timer for the next renewal, TTL/3 after this one
// was sent.
func (h *Hold) renewal() {
	h.mu.Lock()
	if h.released || h.lostErr != nil {
		h.mu.Unlock()
		return
	}
	done := make(chan struct{})
	h.beating = done
	capped := !h.capEnd.IsZero() && !h.validUntil.Before(h.capEnd)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.beating = nil
		h.mu.Unlock()
		close(done)
	}()
	if capped {
		return // the cap is reached: Lost fires at validUntil
	}
	sent, ok := h.renew(h.beatCtx)
	if !ok {
		return
	}
	h.mu.Lock()
	if !h.released && h.lostErr == nil {
		h.beat.Reset(time.Until(sent.Add(h.spec.TTL / 3)))
	}
	h.mu.Unlock()
}

// renew renews once, retrying transient failures while the lock is
// trusted. ok is false when the renewals should end.
func (h *Hold) renew(ctx context.Context) (sent time.Time, ok bool) {
	pause := h.spec.RetryMin
	for attempt := 1; ; attempt++ {
		validUntil, lost := h.state()
		if lost || !time.Now().Before(validUntil) {
			return sent, false // the timer reports the loss
		}
		rctx, cancel := context.WithDeadline(ctx, validUntil)
		sent = time.Now()
		refused, err := h.b.Renew(rctx)
		cancel()
		if ctx.Err() != nil {
			return sent, false // released
		}
		switch {
		case refused:
			h.MarkLost(err)
			return sent, false
		case err == nil:
			h.extend(sent)
			return sent, true
		}
		h.mu.Lock()
		h.lastErr = err
		h.mu.Unlock()
		if h.spec.Observer != nil {
			e := h.spec.Event
			e.Kind, e.Cause, e.Attempt, e.Wait, e.Err = observe.Retry, "renew", attempt, pause, err
			h.spec.Observer.Observe(context.Background(), e)
		}
		if !h.sleepUntil(ctx, time.Now().Add(pause)) {
			return sent, false
		}
		pause = min(2*pause, h.spec.RetryMax)
	}
}

// sleepUntil waits until t; false if the renewals must end first (Release,
// or the lock was lost).
func (h *Hold) sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	case <-h.lostCtx.Done():
		return false
	}
}

// Release stops the renewals, then ends the lock on the server through the
// backend, detached from ctx's cancellation and bounded by
// [ReleaseTimeout], so a cancelled request still releases. It returns
// [ErrReleased] if Release already ran (nothing is sent), otherwise the
// backend's error.
func (h *Hold) Release(ctx context.Context) error {
	h.relMu.Lock()
	defer h.relMu.Unlock()
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return ErrReleased
	}
	h.released = true
	wasLost := h.lostErr != nil
	h.timer.Stop()
	h.beat.Stop()
	beating := h.beating
	h.mu.Unlock()
	// A renewal in flight is cancelled, and has ended before the release
	// is sent: every request it sent was issued before the release's (a
	// backend that orders its requests, as Redlock's does per server, then
	// has no renewal land after the release). A renewal that started
	// after released was set sends nothing.
	h.stopBeat()
	if beating != nil {
		<-beating
	}
	if ctx == nil {
		ctx = context.Background()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	err := h.b.Release(rctx)
	if !wasLost { // a loss was reported when it happened
		outcome := observe.Released
		if err != nil {
			outcome = observe.Lost
		}
		h.emitEnd(ctx, outcome, err)
	}
	return err
}

// emitEnd reports the end of the hold.
func (h *Hold) emitEnd(ctx context.Context, outcome observe.Outcome, err error) {
	if h.spec.Observer == nil {
		return
	}
	e := h.spec.Event
	e.Kind, e.Outcome, e.Hold, e.Err = observe.LockRelease, outcome, time.Since(h.started), err
	h.spec.Observer.Observe(ctx, e)
}

// reportAcquired reports the acquisition to the observer, and releases the
// lock on the server if the observer does not return.
func (h *Hold) reportAcquired(ctx context.Context, began time.Time) {
	returned := false
	defer func() {
		if !returned {
			h.released = true
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
			defer cancel()
			h.b.Release(rctx)
		}
	}()
	e := h.spec.Event
	e.Kind, e.Outcome, e.Wait = observe.LockAcquire, observe.Acquired, time.Since(began)
	h.spec.Observer.Observe(ctx, e)
	returned = true
}

// ObserveFailure reports an acquisition that began at start and failed
// with err to o, if neither is nil (a granted one is reported by
// [Hold.Start]): e gives the Source, Key and Name; the outcome is err's
// ([Outcome]). An acquisition that refused its input before anything was
// sent (err matches invalid, the package's sentinel for bad input, or
// sqlock's ErrNilHandle or ErrInvalidOption) is not reported.
func ObserveFailure(ctx context.Context, o observe.Observer, e observe.Event, start time.Time, err, invalid error) {
	if o == nil || err == nil || errors.Is(err, invalid) || errors.Is(err, sqlock.ErrNilHandle) ||
		errors.Is(err, sqlock.ErrInvalidOption) {
		return
	}
	e.Kind, e.Outcome, e.Wait, e.Err = observe.LockAcquire, Outcome(err), time.Since(start), err
	o.Observe(ctx, e)
}

// Outcome classifies an acquisition's error for observers by the shared
// sentinels every lock backend's errors match.
func Outcome(err error) observe.Outcome {
	switch {
	case err == nil:
		return observe.Acquired
	case errors.Is(err, sqlock.ErrTimeout):
		return observe.Timeout
	case errors.Is(err, sqlock.ErrNotAcquired):
		return observe.Busy
	case errors.Is(err, context.Canceled):
		return observe.Canceled
	}
	return observe.Failed
}

// BoundWait bounds an acquisition's wait by d, the package's own wait
// timeout (WithTimeout); a deadline of ctx that comes first still wins.
// [WaitEnd] tells the two apart once the context has ended.
func BoundWait(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, boundError{d})
}

// boundError is the cause of a wait ended by its package's own bound. It
// matches no context error: the caller's deadline did not pass.
type boundError struct{ d time.Duration }

func (e boundError) Error() string {
	return fmt.Sprintf("waited for the whole wait timeout (%v, WithTimeout)", e.d)
}

// WaitEnd says how ctx, a wait's context (bounded by [BoundWait] or not),
// ended. timedOut: the wait ran out — at the package's own bound (cause
// then says so and matches no context error, whatever the caller's
// context) or at the caller's deadline (cause then matches
// context.DeadlineExceeded). Otherwise the caller cancelled, and cause is
// its cause. So behind sqlock.Acquirer "did my deadline pass?" has the
// same answer on every backend.
func WaitEnd(ctx context.Context) (timedOut bool, cause error) {
	cause = context.Cause(ctx)
	if _, own := cause.(boundError); own {
		return true, cause
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false, cause
	}
	if !errors.Is(cause, context.DeadlineExceeded) { // a deadline with a cause of the caller's
		cause = fmt.Errorf("%w: %w", context.DeadlineExceeded, cause)
	}
	return true, cause
}
