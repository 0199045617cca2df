package redislock

import (
	"context"
	"time"

	"github.com/sqlock/sqlock"
)

// Acquirer returns lk as a [sqlock.Acquirer] whose locks last ttl (renewed
// as every lock is): Acquire is [Locker.Acquire] and TryAcquire is
// [Locker.TryAcquire], each returning a *[Lock] (a [sqlock.Fenced]). An
// invalid ttl is reported by every acquisition, as [ErrInvalid].
func (lk *Locker) Acquirer(ttl time.Duration) sqlock.Acquirer {
	return lockerTTL{lk, ttl}
}

// Acquirer returns r as a [sqlock.Acquirer] whose locks last ttl, each a
// *[RedlockLock] (a [sqlock.Lock], not Fenced).
func (r *Redlock) Acquirer(ttl time.Duration) sqlock.Acquirer {
	return redlockTTL{r, ttl}
}

type lockerTTL struct {
	lk  *Locker
	ttl time.Duration
}

func (a lockerTTL) Acquire(ctx context.Context, key string) (sqlock.Lock, error) {
	return asLock(a.lk.Acquire(ctx, key, a.ttl))
}

func (a lockerTTL) TryAcquire(ctx context.Context, key string) (sqlock.Lock, error) {
	return asLock(a.lk.TryAcquire(ctx, key, a.ttl))
}

type redlockTTL struct {
	r   *Redlock
	ttl time.Duration
}

func (a redlockTTL) Acquire(ctx context.Context, key string) (sqlock.Lock, error) {
	return asLock(a.r.Acquire(ctx, key, a.ttl))
}

func (a redlockTTL) TryAcquire(ctx context.Context, key string) (sqlock.Lock, error) {
	return asLock(a.r.TryAcquire(ctx, key, a.ttl))
}

// asLock keeps a failed acquisition's typed nil from becoming a non-nil
// sqlock.Lock.
func asLock[L sqlock.Lock](l L, err error) (sqlock.Lock, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}
