package dynamo

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// margin is the clock-rate allowance: a lock granted or renewed by a
// request sent at t is trusted until t + TTL − margin on the holder's
// monotonic clock, while a waiter takes over only after watching the
// record version the request wrote for the TTL on its own, from when the
// answer showing it arrived (after the write). Only the two clocks' rates
// can differ in between, never their readings: 1% of the TTL plus 2 ms.
func margin(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Renewal retries: a transient failure is tried again after a pause that
// doubles from retryMin to retryMax, while the lock is still trusted.
const (
	retryMin = 5 * time.Millisecond
	retryMax = 200 * time.Millisecond
)

// maxUnknown bounds the record versions of renewals whose answers were
// lost that a lock still accepts as its own.
const maxUnknown = 32

// Lock is a lock held in a DynamoDB table, with a fencing token. Its
// methods are safe for concurrent use.
type Lock struct {
	lk    *Locker
	name  string
	owner string
	token int64
	ttl   time.Duration
	hold  ttllock.Hold

	mu      sync.Mutex
	rvn     string   // the record version last confirmed
	unknown []string // record versions sent since, whose answers were lost
}

// A Lock is a [sqlock.Lock] with a fencing token.
var _ sqlock.Fenced = (*Lock)(nil)

// start reports and arms the lock granted by a request sent at sent.
func (l *Lock) start(ctx context.Context, ttl time.Duration, began, sent time.Time) {
	l.ttl = ttl
	l.hold.Start(ctx, (*lockBackend)(l), ttllock.Spec{
		TTL: ttl, Margin: margin(ttl), MarginName: "clock-rate allowance",
		RetryMin: retryMin, RetryMax: retryMax,
		Observer: l.lk.cfg.Observer, Event: event(l.name),
		Timers: &l.lk.timers,
	}, began, sent)
}

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Token is the lock's fencing token: the lock item's counter, incremented
// by the same conditional write that granted the lock, so it is greater
// than every earlier holder's of the same name (Release keeps the counter;
// deleting the item by hand resets it). Write it beside the data the lock
// protects and refuse smaller ones ([Table.UpdateFenced] does, in
// DynamoDB).
func (l *Lock) Token() int64 { return l.token }

// Deadline is the local time until which the lock is trusted: when the
// request that granted or last renewed it was sent, plus the TTL, less the
// clock-rate allowance (1% of the TTL plus 2 ms).
func (l *Lock) Deadline() time.Time { return l.hold.Deadline() }

// Lost returns a channel that is closed when the lock can no longer be
// trusted: a renewal was refused (the item is someone else's, or gone), or
// none was confirmed before Deadline — which is before any waiter can have
// watched the record version for the whole TTL. A Release never closes it.
func (l *Lock) Lost() <-chan struct{} { return l.hold.Lost() }

// Err is nil while the lock is trusted, and then an error matching
// [ErrLost] that says why.
func (l *Lock) Err() error { return l.hold.Err() }

// Context returns a context derived from parent that ends when the lock is
// lost (its cause then matches [ErrLost]) or cancel is called, and that
// carries the lock's fencing token ([sqlock.WithFencingToken]), which
// [Table.UpdateFenced] and the fenced writes of versioned, sqlxhelpers and
// gormplugin check. Call cancel when done.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.hold.Context(sqlock.WithFencingToken(parent, l.token))
}

// Release stops the renewals and frees the lock if the item is still this
// holder's (a write conditional on the owner and record version, which
// keeps the fencing counter), detached from ctx's cancellation with a
// bound of its own. It returns nil if DynamoDB confirmed; an error
// matching [ErrNotHeld] if the lock had been taken over or freed (nothing
// changed) or Release already ran; otherwise the SDK's error (a waiter
// then takes the lock over after its TTL).
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return &Error{Op: "release", Err: ErrNotHeld, Cause: errors.New("nil lock")}
	}
	err := l.hold.Release(ctx)
	if err == ttllock.ErrReleased {
		return &Error{Op: "release", Table: l.lk.table, Name: l.name, Err: ErrNotHeld, Cause: err}
	}
	return err
}

// mine adds the condition that the item is still this holder's: its owner,
// and a record version this lock wrote.
func (l *Lock) mine(e *expr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cond := e.name(AttrOwner) + " = " + e.str(l.owner) + " AND " + e.name(AttrRV)
	if len(l.unknown) == 0 {
		e.cond(cond + " = " + e.str(l.rvn))
		return
	}
	cond += " IN (" + e.str(l.rvn)
	for _, r := range l.unknown {
		cond += ", " + e.str(r)
	}
	e.cond(cond + ")")
}

// renewItem writes a new record version (and the lease) if the item is
// still this holder's.
func (l *Lock) renewItem(ctx context.Context) (refused bool, err error) {
	var e expr
	l.mine(&e)
	next := newID()
	e.assign(AttrRV, &types.AttributeValueMemberS{Value: next})
	e.assign(AttrLease, &types.AttributeValueMemberN{Value: strconv.FormatInt(l.ttl.Milliseconds(), 10)})
	_, err = l.lk.c.UpdateItem(ctx, l.lk.update(l.name, &e))
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.rvn, l.unknown = next, nil
		return false, nil
	}
	if failed, _ := conditionFailed(err); failed {
		return true, err
	}
	if len(l.unknown) < maxUnknown { // the write may have landed
		l.unknown = append(l.unknown, next)
	}
	return false, err
}

// releaseItem frees the lock if the item is still this holder's, keeping
// the fencing counter.
func (l *Lock) releaseItem(ctx context.Context) (notHeld bool, err error) {
	var e expr
	l.mine(&e)
	e.assign(AttrOwner, nil)
	e.assign(AttrRV, nil)
	e.assign(AttrLease, nil)
	_, err = l.lk.c.UpdateItem(ctx, l.lk.update(l.name, &e))
	if failed, _ := conditionFailed(err); failed {
		return true, nil
	}
	return false, err
}

// lockBackend is a Lock seen by package internal/ttllock.
type lockBackend Lock

func (b *lockBackend) Renew(ctx context.Context) (refused bool, err error) {
	refused, err = (*Lock)(b).renewItem(ctx)
	if refused {
		err = errors.New("the item is no longer this holder's (taken over or freed)")
	}
	return refused, err
}

func (b *lockBackend) Release(ctx context.Context) error {
	notHeld, err := (*Lock)(b).releaseItem(ctx)
	switch {
	case notHeld:
		return &Error{Op: "release", Table: b.lk.table, Name: b.name, Err: ErrNotHeld,
			Cause: errors.New("the item is no longer this holder's (taken over or freed); nothing changed")}
	case err != nil:
		return &Error{Op: "release", Table: b.lk.table, Name: b.name, Cause: err}
	}
	return nil
}

func (b *lockBackend) LostError(cause error) error {
	return &Error{Op: "hold", Table: b.lk.table, Name: b.name, Err: ErrLost, Cause: cause}
}
