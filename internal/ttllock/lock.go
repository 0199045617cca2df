package ttllock

import (
	"context"
	"errors"
	"time"

	"github.com/sqlock/sqlock"
)

// Lock is a lock granted through [Acquire]: its name and token, its
// server side ([Held]) and its [Hold]. A package embeds it in its own lock
// type, whose methods say, in the package's words, what these do.
type Lock struct {
	h     Hold
	p     *Package
	name  string
	token int64
	held  Held
}

// start arms l, granted by g for ttl through b.
func (l *Lock) start(ctx context.Context, b *Base, name string, ttl time.Duration, g Grant, began, sent time.Time) {
	l.p, l.name, l.token, l.held = b.p, name, g.Token, g.Held
	l.h.Start(ctx, (*lockServer)(l), Spec{
		TTL: ttl, Margin: b.p.Margin(ttl), MarginName: b.p.MarginName, MaxHold: b.cfg.MaxHold,
		RetryMin: b.p.RetryMin, RetryMax: b.p.RetryMax,
		Observer: b.cfg.Observer, Event: b.event(name),
		Timers: &b.timers,
	}, began, sent)
}

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Token is the fencing token minted with the grant; 0 if none.
func (l *Lock) Token() int64 { return l.token }

// Held is the lock's server side, as the Store's Grant returned it.
func (l *Lock) Held() Held { return l.held }

// Hold is the lock's hold, for what a package adds (a guard that finds the
// lock lost marks it so: [Hold.MarkLost]).
func (l *Lock) Hold() *Hold { return &l.h }

// Deadline is the local time until which the lock is trusted.
func (l *Lock) Deadline() time.Time { return l.h.Deadline() }

// Lost is closed when the lock can no longer be trusted.
func (l *Lock) Lost() <-chan struct{} { return l.h.Lost() }

// Err is nil while the lock is trusted, then the package's Lost error.
func (l *Lock) Err() error { return l.h.Err() }

// Context ends when the lock is lost (with the loss as its cause) or
// cancel is called, and carries the lock's fencing token
// (sqlock.WithFencingToken) if the backend minted one.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if l.token != 0 {
		parent = sqlock.WithFencingToken(parent, l.token)
	}
	return l.h.Context(parent)
}

// Release stops the renewals and releases the lock on the server (see
// [Hold.Release]): nil if the server confirmed, the package's NotHeld if
// the lock was no longer this holder's or Release already ran (then
// nothing is sent), otherwise the server's error as the package's.
func (l *Lock) Release(ctx context.Context) error {
	err := l.h.Release(ctx)
	if err == ErrReleased {
		return l.p.Error("release", l.name, l.p.NotHeld, err)
	}
	return err
}

// lockServer is a Lock seen by its Hold: the Held's answers in the
// package's errors.
type lockServer Lock

func (s *lockServer) Renew(ctx context.Context) (refused bool, err error) {
	refused, err = s.held.Renew(ctx)
	if refused && err == nil {
		err = errors.New("the server no longer has the " + s.p.Noun + " as this holder's (expired or taken over)")
	}
	return refused, err
}

func (s *lockServer) Release(ctx context.Context) error {
	notHeld, err := s.held.Release(ctx)
	switch {
	case notHeld:
		return s.p.Error("release", s.name, s.p.NotHeld,
			errors.New("the server no longer has the "+s.p.Noun+" as this holder's (expired or taken over); nothing changed"))
	case err != nil:
		return s.p.Error("release", s.name, nil, err)
	}
	return nil
}

func (s *lockServer) LostError(cause error) error {
	return s.p.Error("hold", s.name, s.p.Lost, cause)
}
