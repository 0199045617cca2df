package etcdlock

import "github.com/sqlock/sqlock/internal/ttllock"

// Errors. Every error this package returns is an *Error matching one of
// these with errors.Is, or one of the shared sentinels of package sqlock
// (ErrNilHandle, ErrInvalidOption), or carries etcd's or the context's
// error as its cause. ErrNotAcquired, ErrTimeout, ErrLost and ErrInvalid
// also match sqlock's ErrNotAcquired, ErrTimeout, ErrLost and
// ErrInvalidArgument, as every lock backend's do.
var (
	// ErrNotAcquired: TryAcquire found the lock held by someone else.
	ErrNotAcquired = sentinels.NotAcquired
	// ErrTimeout: Acquire waited for its whole bound (WithTimeout, or the
	// context's deadline, which then — and only then — also matches
	// context.DeadlineExceeded) without getting the lock, or the cluster
	// did not answer within it (no quorum).
	ErrTimeout = sentinels.Timeout
	// ErrLost: the lock can no longer be trusted — no keepalive of its
	// lease was confirmed before its local deadline, or the cluster no
	// longer has the lease.
	ErrLost = sentinels.Lost
	// ErrNotHeld: Release of a lock that was already released, or whose
	// lease the cluster no longer had (it expired: someone else may have
	// held the lock since); nothing changed.
	ErrNotHeld = sentinels.NotHeld
	// ErrInvalid: an empty or oversized name, or a TTL outside
	// [MinTTL, MaxTTL]. Nothing was sent.
	ErrInvalid = sentinels.Invalid
)

// sentinels are the errors every TTL lock backend reports, in this
// package's words.
var sentinels = ttllock.NewSentinels("etcdlock", "lock", "name")

// Error is the error type of this package.
type Error struct {
	Op    string // "acquire", "tryacquire", "hold", "release", "new"
	Name  string // the lock's name, "" when not applicable
	Err   error  // one of the sentinels above, or nil
	Cause error  // the underlying error (etcd, context, detail), or nil
}

func (e *Error) Error() string { return ttllock.ErrorText("etcdlock", e.Op, e.Name, e.Err, e.Cause) }

// Unwrap returns the sentinel and the cause, so errors.Is and errors.As see
// both.
func (e *Error) Unwrap() []error { return ttllock.Unwrap(e.Err, e.Cause) }
