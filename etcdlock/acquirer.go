package etcdlock

import (
	"context"
	"time"

	"github.com/sqlock/sqlock"
)

// Acquirer returns lk as a [sqlock.Acquirer] whose locks last ttl (kept
// alive as every lock is): Acquire is [Locker.Acquire] and TryAcquire is
// [Locker.TryAcquire], each returning a *[Lock] (a [sqlock.Fenced]). An
// invalid ttl is reported by every acquisition, as [ErrInvalid].
func (lk *Locker) Acquirer(ttl time.Duration) sqlock.Acquirer {
	return acquirer{lk, ttl}
}

type acquirer struct {
	lk  *Locker
	ttl time.Duration
}

func (a acquirer) Acquire(ctx context.Context, name string) (sqlock.Lock, error) {
	return asLock(a.lk.Acquire(ctx, name, a.ttl))
}

func (a acquirer) TryAcquire(ctx context.Context, name string) (sqlock.Lock, error) {
	return asLock(a.lk.TryAcquire(ctx, name, a.ttl))
}

// asLock keeps a failed acquisition's typed nil from becoming a non-nil
// sqlock.Lock.
func asLock(l *Lock, err error) (sqlock.Lock, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}
