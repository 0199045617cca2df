package lease

import (
	"context"
	"errors"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/ttllock"
	"github.com/sqlock/sqlock/observe"
)

// marginDivisor sets the safety margin: a lease is trusted locally until
// ttl − ttl/marginDivisor after its last acquiring or renewing request was
// sent. It covers a client clock that runs slow against the server's and
// the time the holder needs to stop.
const marginDivisor = 10

// Renewal retries: a transient failure is tried again after a pause that
// doubles from retryMin to retryMax, while the lease is still trusted.
const (
	retryMin = 5 * time.Millisecond
	retryMax = 250 * time.Millisecond
)

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	m     *Manager
	name  string
	owner string
	token int64
	h     ttllock.Hold // the local deadline, the renewals, the loss
}

// newLease reports and arms a lease granted by a request sent at sent, in
// an acquisition that began at began (should the observer panic on it, the
// lease is released first).
func (m *Manager) newLease(ctx context.Context, name, owner string, token int64, ttl time.Duration, began, sent time.Time) *Lease {
	l := &Lease{m: m, name: name, owner: owner, token: token}
	l.h.Start(ctx, (*backendOf)(l), ttllock.Spec{
		TTL: ttl, Margin: ttl / marginDivisor, MarginName: "safety margin", MaxHold: m.cfg.maxHold,
		RetryMin: retryMin, RetryMax: retryMax,
		Observer: m.cfg.obs, Event: observe.Event{Source: "lease", Name: name},
		Timers: &m.timers,
	}, began, sent)
	return l
}

// backendOf is a Lease seen by its hold: it renews and releases with the
// Manager's statements.
type backendOf Lease

func (b *backendOf) Renew(ctx context.Context) (refused bool, err error) {
	l := (*Lease)(b)
	sent := time.Now()
	var token int64
	err = l.m.b.queryRow(ctx, l.m.stmt.renew, []any{l.name, l.owner, l.h.TTL().Microseconds()}, &token)
	switch {
	case err == nil:
		l.m.observeRTT(time.Since(sent))
		return false, nil
	case errors.Is(err, errNoRows):
		return true, errors.New("the server no longer has the lease as this holder's (expired or taken over)")
	}
	return permanent(err), err
}

func (b *backendOf) Release(ctx context.Context) error {
	l := (*Lease)(b)
	var one int
	err := l.m.b.queryRow(ctx, l.m.stmt.release, []any{l.name, l.owner}, &one)
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

func (b *backendOf) LostError(cause error) error {
	return &Error{Op: "hold", Name: b.name, Err: ErrLost, Cause: cause}
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
func (l *Lease) Deadline() time.Time { return l.h.Deadline() }

// Lost returns a channel that is closed when the lease can no longer be
// trusted: a renewal was refused by the server (the lease is someone
// else's), no renewal was confirmed before [Lease.Deadline], or the
// maximum hold time was reached. It fires before the server lets anyone
// else in, by the safety margin. A Release never closes it.
func (l *Lease) Lost() <-chan struct{} { return l.h.Lost() }

// Err is nil while the lease is trusted, and then an error matching
// [ErrLost] that says why.
func (l *Lease) Err() error { return l.h.Err() }

// Context returns a context derived from parent that ends when the lease
// is lost (its cause then matches [ErrLost]) or cancel is called, and that
// carries the lease's fencing token ([sqlock.WithFencingToken]): the fenced
// writes of versioned, sqlxhelpers and gormplugin made with it are refused
// by the database once a newer holder has written. Call cancel when done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.h.Context(sqlock.WithFencingToken(parent, l.token))
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
	err := l.h.Release(ctx)
	if err == ttllock.ErrReleased {
		return &Error{Op: "release", Name: l.name, Err: ErrNotHeld, Cause: err}
	}
	return err
}
