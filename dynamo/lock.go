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
	tl ttllock.Lock
}

// A Lock is a [sqlock.Lock] with a fencing token.
var _ sqlock.Fenced = (*Lock)(nil)

// Name is the lock's name.
func (l *Lock) Name() string { return l.tl.Name() }

// Token is the lock's fencing token: the lock item's counter, incremented
// by the same conditional write that granted the lock, so it is greater
// than every earlier holder's of the same name (Release keeps the counter;
// deleting the item by hand resets it). Write it beside the data the lock
// protects and refuse smaller ones ([Table.UpdateFenced] does, in
// DynamoDB).
func (l *Lock) Token() int64 { return l.tl.Token() }

// Deadline is the local time until which the lock is trusted: when the
// request that granted or last renewed it was sent, plus the TTL, less the
// clock-rate allowance (1% of the TTL plus 2 ms).
func (l *Lock) Deadline() time.Time { return l.tl.Deadline() }

// Lost returns a channel that is closed when the lock can no longer be
// trusted: a renewal was refused (the item is someone else's, or gone), or
// none was confirmed before Deadline — which is before any waiter can have
// watched the record version for the whole TTL. A Release never closes it.
func (l *Lock) Lost() <-chan struct{} { return l.tl.Lost() }

// Err is nil while the lock is trusted, and then an error matching
// [ErrLost] that says why.
func (l *Lock) Err() error { return l.tl.Err() }

// Context returns a context derived from parent that ends when the lock is
// lost (its cause then matches [ErrLost]) or cancel is called, and that
// carries the lock's fencing token ([sqlock.WithFencingToken]), which
// [Table.UpdateFenced] and the fenced writes of versioned, sqlxhelpers and
// gormplugin check. Call cancel when done.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.tl.Context(parent)
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
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}

// held is a granted lock's item seen by package internal/ttllock: a
// renewal writes a new record version, a release removes the owner, each
// conditional on the item still being this holder's.
type held struct {
	lk    *Locker
	name  string
	owner string
	ttl   time.Duration

	mu      sync.Mutex
	rvn     string   // the record version last confirmed
	unknown []string // record versions sent since, whose answers were lost
}

// mine adds the condition that the item is still this holder's: its owner,
// and a record version this lock wrote.
func (h *held) mine(e *expr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cond := e.name(AttrOwner) + " = " + e.str(h.owner) + " AND " + e.name(AttrRV)
	if len(h.unknown) == 0 {
		e.cond(cond + " = " + e.str(h.rvn))
		return
	}
	cond += " IN (" + e.str(h.rvn)
	for _, r := range h.unknown {
		cond += ", " + e.str(r)
	}
	e.cond(cond + ")")
}

// Renew writes a new record version (and the lease) if the item is still
// this holder's.
func (h *held) Renew(ctx context.Context) (refused bool, err error) {
	var e expr
	h.mine(&e)
	next := newID()
	e.assign(AttrRV, &types.AttributeValueMemberS{Value: next})
	e.assign(AttrLease, &types.AttributeValueMemberN{Value: strconv.FormatInt(h.ttl.Milliseconds(), 10)})
	_, err = h.lk.c.UpdateItem(ctx, h.lk.update(h.name, &e))
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.rvn, h.unknown = next, nil
		return false, nil
	}
	if failed, _ := conditionFailed(err); failed {
		return true, errors.New("the item is no longer this holder's (taken over or freed)")
	}
	if len(h.unknown) < maxUnknown { // the write may have landed
		h.unknown = append(h.unknown, next)
	}
	return false, err
}

// Release frees the lock if the item is still this holder's, keeping the
// fencing counter.
func (h *held) Release(ctx context.Context) (notHeld bool, err error) {
	var e expr
	h.mine(&e)
	e.assign(AttrOwner, nil)
	e.assign(AttrRV, nil)
	e.assign(AttrLease, nil)
	_, err = h.lk.c.UpdateItem(ctx, h.lk.update(h.name, &e))
	if failed, _ := conditionFailed(err); failed {
		return true, nil
	}
	return false, err
}
