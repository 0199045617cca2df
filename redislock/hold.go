package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/sqlock/sqlock/internal/lazytimer"
	ihold "github.com/sqlock/sqlock/internal/ttllock"
	"github.com/sqlock/sqlock/observe"
)

// drift is the clock-drift allowance the Redlock algorithm states: 1% of
// the TTL plus 2 ms. A lock is trusted locally until ttl − drift after the
// command that acquired or last extended it was sent.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

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

// hold is a held lock's state: its local deadline, the renewals, the loss
// (package internal/ttllock), on servers. The exported methods are promoted
// to *Lock and *RedlockLock.
type hold struct {
	srv servers
	key string
	h   ihold.Hold
}

// start reports and arms a hold acquired by a command sent at sent, in an
// acquisition that began at began; obs (nil: none) receives its events
// (should it panic on the acquisition, the lock is released first); its
// timers join timers.
func (h *hold) start(ctx context.Context, srv servers, key string, ttl time.Duration, began, sent time.Time, obs observe.Observer, timers *lazytimer.Queue) {
	h.srv, h.key = srv, key
	h.h.Start(ctx, (*holdBackend)(h), ihold.Spec{
		TTL: ttl, Margin: drift(ttl), MarginName: "drift allowance",
		RetryMin: retryMin, RetryMax: retryMax,
		Observer: obs, Event: observe.Event{Source: "redislock", Name: key},
		Timers: timers,
	}, began, sent)
}

// holdBackend is a hold seen by package internal/ttllock.
type holdBackend hold

func (b *holdBackend) Renew(ctx context.Context) (refused bool, err error) {
	refused, err = b.srv.extend(ctx)
	if refused {
		err = errors.New("the server no longer has the lock as this holder's (expired or taken over)")
	}
	return refused, err
}

func (b *holdBackend) Release(ctx context.Context) error {
	notHeld, err := b.srv.release(ctx)
	switch {
	case notHeld:
		return &Error{Op: "release", Key: b.key, Err: ErrNotHeld,
			Cause: errors.New("the server no longer has the lock as this holder's (expired or taken over); nothing changed")}
	case err != nil:
		return &Error{Op: "release", Key: b.key, Cause: err}
	}
	return nil
}

func (b *holdBackend) LostError(cause error) error {
	return &Error{Op: "hold", Key: b.key, Err: ErrLost, Cause: cause}
}

// Key is the lock's key.
func (h *hold) Key() string { return h.key }

// Deadline is the local time until which the lock is trusted: when the
// command that acquired or last extended it was sent, plus the TTL, less
// the drift allowance (1% of the TTL plus 2 ms). Lost fires then unless a
// renewal moves it.
func (h *hold) Deadline() time.Time { return h.h.Deadline() }

// Lost returns a channel that is closed when the lock can no longer be
// trusted: a renewal was refused (the lock is someone else's, or gone), or
// none was confirmed before Deadline — which is before the key can expire
// on the server (on a majority, for Redlock), by the drift allowance. A
// Release never closes it.
func (h *hold) Lost() <-chan struct{} { return h.h.Lost() }

// Err is nil while the lock is trusted, and then an error matching
// [ErrLost] that says why.
func (h *hold) Err() error { return h.h.Err() }

// Context returns a context derived from parent that ends when the lock is
// lost (its cause then matches [ErrLost]) or cancel is called. Call cancel
// when done.
func (h *hold) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return h.h.Context(parent)
}

// Release deletes the lock where it is still this holder's (an
// owner-checked script), after stopping the renewals. It runs detached
// from ctx's cancellation with a bound of its own, so a cancelled request
// still releases. It returns nil if the server (a majority, for Redlock)
// confirmed it; an error matching [ErrNotHeld] if the lock had expired or
// been taken over (nothing changed) or Release already ran (nothing was
// sent); otherwise Redis's error (the lock then expires by its TTL).
func (h *hold) Release(ctx context.Context) error {
	err := h.h.Release(ctx)
	if err == ihold.ErrReleased {
		return &Error{Op: "release", Key: h.key, Err: ErrNotHeld, Cause: err}
	}
	return err
}
