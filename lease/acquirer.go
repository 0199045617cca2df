package lease

import (
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/ttllock"
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
	return ttllock.Acquirer(m.Acquire, m.TryAcquire, ttl)
}
