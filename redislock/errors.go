package redislock

import (
	"context"
	"errors"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	ihold "github.com/sqlock/sqlock/internal/ttllock"
)

// Errors. Every error this package returns is an *Error matching one of
// these with errors.Is, or one of the shared sentinels of package sqlock
// (ErrNilHandle, ErrInvalidOption), or carries Redis's or the context's
// error as its cause. ErrNotAcquired, ErrTimeout and ErrLost also match
// sqlock's of the same name, and ErrInvalid matches
// sqlock.ErrInvalidArgument, as every lock backend's do.
var (
	// ErrNotAcquired: TryAcquire found the lock held by someone else.
	ErrNotAcquired = errkind.New(sqlock.ErrNotAcquired, "redislock: held by someone else")
	// ErrTimeout: Acquire waited for its whole bound (WithTimeout, or the
	// context's deadline, which then — and only then — also matches
	// context.DeadlineExceeded) without getting the lock.
	ErrTimeout = errkind.New(sqlock.ErrTimeout, "redislock: timed out waiting for the lock")
	// ErrLost: the lock can no longer be trusted — no renewal was
	// confirmed before its local deadline, or the server (a majority, for
	// Redlock) no longer has it as this holder's.
	ErrLost = errkind.New(sqlock.ErrLost, "redislock: lost")
	// ErrNotHeld: Release of a lock that was already released, or that the
	// server (a majority) no longer had as this holder's; nothing changed.
	ErrNotHeld = errors.New("redislock: not held")
	// ErrNoQuorum: fewer than a majority of a Redlock's servers answered,
	// so the lock can be neither granted nor refused.
	ErrNoQuorum = errors.New("redislock: no majority of the servers answered")
	// ErrInvalid: an empty key, a key with a NUL byte (the fencing
	// counters' key space, FenceKey), or a TTL shorter than MinTTL.
	// Nothing was sent. It matches [sqlock.ErrInvalidArgument] too.
	ErrInvalid = errkind.New(sqlock.ErrInvalidArgument, "redislock: invalid key or TTL")
)

// Error is the error type of this package.
type Error struct {
	Op    string // "acquire", "tryacquire", "hold", "release", "new"
	Key   string // the lock's key, "" when not applicable
	Err   error  // one of the sentinels above, or nil
	Cause error  // the underlying error (Redis, context, detail), or nil
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("redislock: ")
	b.WriteString(e.Op)
	if e.Key != "" {
		b.WriteString(" ")
		b.WriteString(quoteKey(e.Key))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(e.Err.Error(), "redislock: "))
	}
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

// Unwrap returns the sentinel and the cause, so errors.Is and errors.As see
// both.
func (e *Error) Unwrap() []error {
	out := make([]error, 0, 2)
	if e.Err != nil {
		out = append(out, e.Err)
	}
	if e.Cause != nil {
		out = append(out, e.Cause)
	}
	return out
}

// quoteKey shows a key in an error, cut to a readable length.
func quoteKey(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "…"
	}
	return `"` + s + `"`
}

// ctxError turns the end of an acquisition's context into an error: a
// wait that ran out is ErrTimeout — matching context.DeadlineExceeded only
// when the caller's deadline, not WithTimeout, ended it — and a
// cancellation is the context's cause. last, when not nil, is the last
// attempt's failure.
func ctxError(op, key string, ctx context.Context, last error) error {
	timedOut, cause := ihold.WaitEnd(ctx)
	if last != nil {
		cause = errors.Join(cause, last)
	}
	if timedOut {
		return &Error{Op: op, Key: key, Err: ErrTimeout, Cause: cause}
	}
	return &Error{Op: op, Key: key, Cause: cause}
}
