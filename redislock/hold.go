package redislock

import (
	"context"
	"time"

	"github.com/sqlock/sqlock/internal/ttllock"
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

// kit is this package to the TTL-lock toolkit (internal/ttllock), which
// does all but the scripts and the majority's rules.
var kit = ttllock.Package{
	Name: "redislock", System: "redis", Noun: "lock",
	Sentinels: sentinels,
	Error: func(op, key string, kind, cause error) error {
		return &Error{Op: op, Key: key, Err: kind, Cause: cause}
	},
	Margin: drift, MarginName: "drift allowance",
	RetryMin: retryMin, RetryMax: retryMax,
	DefaultTimeout: DefaultTimeout,
}

// hold is a held lock: its local deadline, the renewals, the loss (package
// internal/ttllock), on one server or a majority (the ttllock.Held the
// acquisition's Grant returned). The exported methods are promoted to
// *Lock and *RedlockLock.
type hold struct {
	tl ttllock.Lock
}

// Key is the lock's key.
func (h *hold) Key() string { return h.tl.Name() }

// Deadline is the local time until which the lock is trusted: when the
// command that acquired or last extended it was sent, plus the TTL, less
// the drift allowance (1% of the TTL plus 2 ms), and never past the
// maximum hold (WithMaxHold). Lost fires then unless a renewal moves it.
func (h *hold) Deadline() time.Time { return h.tl.Deadline() }

// Lost returns a channel that is closed when the lock can no longer be
// trusted: a renewal was refused (the lock is someone else's, or gone), or
// none was confirmed before Deadline — which is before the key can expire
// on the server (on a majority, for Redlock), by the drift allowance — or
// the maximum hold was reached. A Release never closes it.
func (h *hold) Lost() <-chan struct{} { return h.tl.Lost() }

// Err is nil while the lock is trusted, and then an error matching
// [ErrLost] that says why.
func (h *hold) Err() error { return h.tl.Err() }

// Context returns a context derived from parent that ends when the lock is
// lost (its cause then matches [ErrLost]) or cancel is called. Call cancel
// when done.
func (h *hold) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return h.tl.Context(parent)
}

// Release deletes the lock where it is still this holder's (an
// owner-checked script), after stopping the renewals. It runs detached
// from ctx's cancellation with a bound of its own, so a cancelled request
// still releases. It returns nil if the server (a majority, for Redlock)
// confirmed it; an error matching [ErrNotHeld] if the lock had expired or
// been taken over (nothing changed) or Release already ran (nothing was
// sent); otherwise Redis's error (the lock then expires by its TTL).
func (h *hold) Release(ctx context.Context) error { return h.tl.Release(ctx) }
