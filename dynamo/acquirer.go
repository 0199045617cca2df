package dynamo

import (
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// Acquirer returns lk as a [sqlock.Acquirer] whose locks last ttl (renewed
// as every lock is): Acquire is [Locker.Acquire] and TryAcquire is
// [Locker.TryAcquire], each returning a *[Lock] (a [sqlock.Fenced]). An
// invalid ttl is reported by every acquisition, as [ErrInvalid].
func (lk *Locker) Acquirer(ttl time.Duration) sqlock.Acquirer {
	return ttllock.Acquirer(lk.Acquire, lk.TryAcquire, ttl)
}
