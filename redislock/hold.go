package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqlock/sqlock/internal/lazytimer"
)

// drift is the clock-drift allowance the Redlock algorithm states: 1% of
// the TTL plus 2 ms. A lock is trusted locally until ttl − drift after the
// command that acquired or last extended it was sent.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// releaseTimeout bounds Release's commands, which run detached from the
// caller's cancellation.
const releaseTimeout = 3 * time.Second

// Renewal retries: a transient failure is tried again after a pause that
// doubles from retryMin to retryMax, while the lock is still trusted.
const (
	retryMin = 2 * time.Millisecond
	retryMax = 100 * time.Millisecond
)

// servers is what a held lock needs from the server or servers holding it.
type servers interface {
	// extend sets the lock's expiry to its TTL from now, if it is still
	// this holder's. refused: it is not (expired, taken over, or — for
	// Redlock — too few servers still have it for a majority ever to).
	extend(ctx context.Context) (refused bool, err error)
	// release deletes the lock where it is still this holder's. notHeld:
	// it was nowhere (on no majority) this holder's.
	release(ctx context.Context) (notHeld bool, err error)
}

// hold is a held lock's state: its local deadline, the renewal timer, the
// loss. The exported methods are promoted to *Lock and *RedlockLock.
type hold struct {
	srv servers
	key string
	ttl time.Duration

	mu         sync.Mutex
	validUntil time.Time // local monotonic deadline; Lost fires at it
	lastErr    error     // the last failed renewal's error
	lostErr    error
	released   bool
	timer      *lazytimer.Timer // at validUntil
	// The renewal is a timer whose function renews, so that no goroutine
	// exists between renewals.
	beat     *lazytimer.Timer
	beating  chan struct{}      // closed when the running renewal ends; nil if none runs
	beatCtx  context.Context    // cancelled by Release: ends a renewal in flight
	stopBeat context.CancelFunc //

	lostCtx context.Context // cancelled with lostErr
	lose    context.CancelCauseFunc

	relMu sync.Mutex // serialises Release
}

// start arms a hold acquired by a command sent at sent.
func (h *hold) start(srv servers, key string, ttl time.Duration, sent time.Time) {
	h.srv, h.key, h.ttl = srv, key, ttl
	h.lostCtx, h.lose = context.WithCancelCause(context.Background())
	h.beatCtx, h.stopBeat = context.WithCancel(context.Background())
	h.mu.Lock() // the timers' functions may run before AfterFunc returns
	h.validUntil = sent.Add(ttl - drift(ttl))
	h.timer = lazytimer.AfterFunc(time.Until(h.validUntil), h.expire)
	h.beat = lazytimer.AfterFunc(time.Until(sent.Add(ttl/3)), h.renewal)
	h.mu.Unlock()
}

// Key is the lock's key.
func (h *hold) Key() string { return h.key }

// Deadline is the local time until which the lock is trusted: when the
// command that acquired or last extended it was sent, plus the TTL, less
// the drift allowance (1% of the TTL plus 2 ms). Lost fires then unless a
// renewal moves it.
func (h *hold) Deadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// Lost returns a channel that is closed when the lock can no longer be
// trusted: a renewal was refused (the lock is someone else's, or gone), or
// none was confirmed before Deadline — which is before the key can expire
// on the server (on a majority, for Redlock), by the drift allowance. A
// Release never closes it.
func (h *hold) Lost() <-chan struct{} {
	h.checkDeadline()
	return h.lostCtx.Done()
}

// Err is nil while the lock is trusted, and then an error matching
// [ErrLost] that says why.
func (h *hold) Err() error {
	h.checkDeadline()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostErr
}

// Context returns a context derived from parent that ends when the lock is
// lost (its cause then matches [ErrLost]) or cancel is called. Call cancel
// when done.
func (h *hold) Context(parent context.Context) (context.Context, context.CancelFunc) {
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
func (h *hold) checkDeadline() {
	h.mu.Lock()
	due := h.lostErr == nil && !h.released && !time.Now().Before(h.validUntil)
	h.mu.Unlock()
	if due {
		h.expire()
	}
}

// markLost records the loss once, unless the lock was released.
func (h *hold) markLost(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lostErr != nil || h.released {
		return
	}
	h.lostErr = &Error{Op: "hold", Key: h.key, Err: ErrLost, Cause: cause}
	h.timer.Stop()
	h.beat.Stop()
	h.lose(h.lostErr)
}

// expire is the timer at the local deadline.
func (h *hold) expire() {
	h.mu.Lock()
	if time.Now().Before(h.validUntil) { // a renewal moved it as the timer fired
		h.timer.Reset(time.Until(h.validUntil))
		h.mu.Unlock()
		return
	}
	cause := fmt.Errorf("no renewal confirmed in time (TTL %v, drift allowance %v)", h.ttl, drift(h.ttl))
	if h.lastErr != nil {
		cause = fmt.Errorf("%w; last renewal error: %w", cause, h.lastErr)
	}
	h.mu.Unlock()
	h.markLost(cause)
}

// extended records a renewal sent at sent and confirmed.
func (h *hold) extended(sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lostErr != nil || h.released {
		return
	}
	if u := sent.Add(h.ttl - drift(h.ttl)); u.After(h.validUntil) {
		h.validUntil = u
		h.timer.Reset(time.Until(u))
	}
	h.lastErr = nil
}

func (h *hold) state() (validUntil time.Time, lost bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil, h.lostErr != nil
}

// renewal is the renewal timer's function: it renews (retrying transient
// failures) and sets the timer for the next renewal, ttl/3 after this one
// was sent.
func (h *hold) renewal() {
	h.mu.Lock()
	if h.released || h.lostErr != nil {
		h.mu.Unlock()
		return
	}
	done := make(chan struct{})
	h.beating = done
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.beating = nil
		h.mu.Unlock()
		close(done)
	}()
	sent, ok := h.renew(h.beatCtx)
	if !ok {
		return
	}
	h.mu.Lock()
	if !h.released && h.lostErr == nil {
		h.beat.Reset(time.Until(sent.Add(h.ttl / 3)))
	}
	h.mu.Unlock()
}

// renew extends once, retrying transient failures while the lock is
// trusted. ok is false when the renewals should end.
func (h *hold) renew(ctx context.Context) (sent time.Time, ok bool) {
	pause := retryMin
	for {
		validUntil, lost := h.state()
		if lost || !time.Now().Before(validUntil) {
			return sent, false // the timer reports the loss
		}
		rctx, cancel := context.WithDeadline(ctx, validUntil)
		sent = time.Now()
		refused, err := h.srv.extend(rctx)
		cancel()
		if ctx.Err() != nil {
			return sent, false // released
		}
		switch {
		case refused:
			h.markLost(errors.New("the server no longer has the lock as this holder's (expired or taken over)"))
			return sent, false
		case err == nil:
			h.extended(sent)
			return sent, true
		}
		h.mu.Lock()
		h.lastErr = err
		h.mu.Unlock()
		if !h.sleepUntil(ctx, time.Now().Add(pause)) {
			return sent, false
		}
		pause = min(2*pause, retryMax)
	}
}

// sleepUntil waits until t; false if the renewals must end first (Release,
// or the lock was lost).
func (h *hold) sleepUntil(ctx context.Context, t time.Time) bool {
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

// Release deletes the lock where it is still this holder's (an
// owner-checked script), after stopping the renewals. It runs detached
// from ctx's cancellation with a bound of its own, so a cancelled request
// still releases. It returns nil if the server (a majority, for Redlock)
// confirmed it; an error matching [ErrNotHeld] if the lock had expired or
// been taken over (nothing changed) or Release already ran (nothing was
// sent); otherwise Redis's error (the lock then expires by its TTL).
func (h *hold) Release(ctx context.Context) error {
	h.relMu.Lock()
	defer h.relMu.Unlock()
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return &Error{Op: "release", Key: h.key, Err: ErrNotHeld, Cause: errors.New("already released")}
	}
	h.released = true
	h.timer.Stop()
	h.beat.Stop()
	beating := h.beating
	h.mu.Unlock()
	// A renewal in flight is cancelled, and waited for after the release
	// is sent: if it reaches the server after the release it finds no key
	// of ours, which changes nothing.
	h.stopBeat()
	if beating != nil {
		defer func() { <-beating }()
	}
	if ctx == nil {
		ctx = context.Background()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	notHeld, err := h.srv.release(rctx)
	switch {
	case notHeld:
		return &Error{Op: "release", Key: h.key, Err: ErrNotHeld,
			Cause: errors.New("the server no longer has the lock as this holder's (expired or taken over); nothing changed")}
	case err != nil:
		return &Error{Op: "release", Key: h.key, Cause: err}
	}
	return nil
}
