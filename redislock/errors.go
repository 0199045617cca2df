package redislock

import (
	"errors"

	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// Errors. Every error this package returns is an *Error matching one of
// these with errors.Is, or one of the shared sentinels of package sqlock
// (ErrNilHandle, ErrInvalidOption), or carries Redis's or the context's
// error as its cause. ErrNotAcquired, ErrTimeout and ErrLost also match
// sqlock's of the same name, and ErrInvalid matches
// sqlock.ErrInvalidArgument, as every lock backend's do.
var (
	// ErrNotAcquired: TryAcquire found the lock held by someone else.
	ErrNotAcquired = sentinels.NotAcquired
	// ErrTimeout: Acquire waited for its whole bound (WithTimeout, or the
	// context's deadline, which then — and only then — also matches
	// context.DeadlineExceeded) without getting the lock.
	ErrTimeout = sentinels.Timeout
	// ErrLost: the lock can no longer be trusted — no renewal was
	// confirmed before its local deadline, the server (a majority, for
	// Redlock) no longer has it as this holder's, or it reached its
	// maximum hold time (WithMaxHold).
	ErrLost = sentinels.Lost
	// ErrNotHeld: Release of a lock that was already released, or that the
	// server (a majority) no longer had as this holder's; nothing changed.
	ErrNotHeld = sentinels.NotHeld
	// ErrNoQuorum: fewer than a majority of a Redlock's servers answered,
	// so the lock can be neither granted nor refused.
	ErrNoQuorum = errors.New("redislock: no majority of the servers answered")
	// ErrNotReplicated: a Locker with WithReplicas was granted the lock
	// but fewer replicas than asked acknowledged it within the bound, so
	// it was released and not handed out (or a renewal did not count). It
	// matches [ErrNotAcquired] and [sqlock.ErrNotAcquired]: the caller
	// holds nothing.
	ErrNotReplicated = errkind.New(ErrNotAcquired, "redislock: not acknowledged by enough replicas")
	// ErrInvalid: an empty key, an empty or repeated key list (AcquireAll),
	// a holder label or payload over its bound (WithHolder, WithPayload), a key with a NUL byte (the fencing
	// counters' key space, FenceKey), or a TTL shorter than MinTTL.
	// Nothing was sent. It matches [sqlock.ErrInvalidArgument] too.
	ErrInvalid = sentinels.Invalid
)

// sentinels are the errors every TTL lock backend reports, in this
// package's words.
var sentinels = ttllock.NewSentinels("redislock", "lock", "key")

// Error is the error type of this package.
type Error struct {
	Op    string // "acquire", "tryacquire", "acquireall", "tryacquireall", "hold", "release", "holder", "new"
	Key   string // the lock's key, "" when not applicable
	Err   error  // one of the sentinels above, or nil
	Cause error  // the underlying error (Redis, context, detail), or nil
}

func (e *Error) Error() string { return ttllock.ErrorText("redislock", e.Op, e.Key, e.Err, e.Cause) }

// Unwrap returns the sentinel and the cause, so errors.Is and errors.As see
// both.
func (e *Error) Unwrap() []error { return ttllock.Unwrap(e.Err, e.Cause) }
