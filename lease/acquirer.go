package lease

import (
	"context"
	"time"

	"github.com/sqlock/sqlock"
)

// A Lease is a [sqlock.Lock] with a fencing token.
var _ sqlock.Fenced = (*Lease)(nil)

// Acquirer returns m as a [sqlock.Acquirer] whose leases last ttl (renewed
// as every lease is), for code that should not care which backend holds
// its locks: Acquire is [Manager.Acquire] and TryAcquire is
// [Manager.TryAcquire], each returning a *[Lease] (a [sqlock.Fenced]). An
// invalid ttl is reported by every acquisition, as [ErrInvalid]; one too
// short for the network's round trips as [ErrTTLTooShort].
func (m *Manager) Acquirer(ttl time.Duration) sqlock.Acquirer {
	return withTTL{m, ttl}
}

type withTTL struct {
	m   *Manager
	ttl time.Duration
}

func (a withTTL) Acquire(ctx context.Context, name string) (sqlock.Lock, error) {
	return asLock(a.m.Acquire(ctx, name, a.ttl))
}

func (a withTTL) TryAcquire(ctx context.Context, name string) (sqlock.Lock, error) {
	return asLock(a.m.TryAcquire(ctx, name, a.ttl))
}

// asLock keeps a failed acquisition's nil *Lease from becoming a non-nil
// sqlock.Lock.
func asLock(l *Lease, err error) (sqlock.Lock, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}
