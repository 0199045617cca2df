package lease

import (
	"bytes"
	"context"
	"time"

	"github.com/sqlock/sqlock/internal/ttllock"
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

// kit is this package to the TTL-lock toolkit (internal/ttllock), which
// does all but the statements.
var kit = ttllock.Package{
	Name: "lease", System: "postgresql", Noun: "lease",
	Sentinels: sentinels,
	Error: func(op, name string, kind, cause error) error {
		return &Error{Op: op, Name: name, Err: kind, Cause: cause}
	},
	Margin:     func(ttl time.Duration) time.Duration { return ttl / marginDivisor },
	MarginName: "safety margin",
	RetryMin:   retryMin, RetryMax: retryMax,
	DefaultTimeout: DefaultTimeout,
	// A try may wait for an expired lease's row, locked by its old
	// holder's guarded transaction: within the Manager's timeout.
	BoundTry: true,
}

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	a  *acquisition // the Manager, the name, the owner id
	tl ttllock.Lock // the token, the local deadline, the renewals, the loss
}

// Name is the lease's name.
func (l *Lease) Name() string { return l.tl.Name() }

// Token is the lease's fencing token: greater than that of every earlier
// holder of any lease in the table, in every process, across server
// restarts and deletions of the row. Write it beside the data the lease
// protects and refuse writes that carry a smaller one.
func (l *Lease) Token() int64 { return l.tl.Token() }

// Holder is the label stored with the lease ([WithHolder]); "" if none.
func (l *Lease) Holder() string { return l.a.m.cfg.holder }

// Payload is a copy of the bytes stored with the lease ([WithPayload]); nil
// if none.
func (l *Lease) Payload() []byte { return bytes.Clone(l.a.m.cfg.payload) }

// Deadline is the local time until which the lease is trusted: the last
// confirmed renewal's send time plus the TTL, less a safety margin of a
// tenth of the TTL (and never past the Manager's maximum hold). Lost fires
// then unless a renewal moves it.
func (l *Lease) Deadline() time.Time { return l.tl.Deadline() }

// Lost returns a channel that is closed when the lease can no longer be
// trusted: a renewal was refused by the server (the lease is someone
// else's), no renewal was confirmed before [Lease.Deadline], or the
// maximum hold time was reached. It fires before the server lets anyone
// else in, by the safety margin. A Release never closes it.
func (l *Lease) Lost() <-chan struct{} { return l.tl.Lost() }

// Err is nil while the lease is trusted, and then an error matching
// [ErrLost] that says why.
func (l *Lease) Err() error { return l.tl.Err() }

// Context returns a context derived from parent that ends when the lease
// is lost (its cause then matches [ErrLost]) or cancel is called, and that
// carries the lease's fencing token ([sqlock.WithFencingToken]): the fenced
// writes of versioned, sqlxhelpers and gormplugin made with it are refused
// by the database once a newer holder has written. Call cancel when done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.tl.Context(parent)
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
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}
