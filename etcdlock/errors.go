package etcdlock

import (
	"context"
	"errors"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// Errors. Every error this package returns is an *Error matching one of
// these with errors.Is, or one of the shared sentinels of package sqlock
// (ErrNilHandle, ErrInvalidOption), or carries etcd's or the context's
// error as its cause. ErrNotAcquired, ErrTimeout, ErrLost and ErrInvalid
// also match sqlock's ErrNotAcquired, ErrTimeout, ErrLost and
// ErrInvalidArgument, as every lock backend's do.
var (
	// ErrNotAcquired: TryAcquire found the lock held by someone else.
	ErrNotAcquired = errkind.New(sqlock.ErrNotAcquired, "etcdlock: held by someone else")
	// ErrTimeout: Acquire waited for its whole bound (WithTimeout, or the
	// context's deadline, which then — and only then — also matches
	// context.DeadlineExceeded) without getting the lock, or the cluster
	// did not answer within it (no quorum).
	ErrTimeout = errkind.New(sqlock.ErrTimeout, "etcdlock: timed out waiting for the lock")
	// ErrLost: the lock can no longer be trusted — no keepalive of its
	// lease was confirmed before its local deadline, or the cluster no
	// longer has the lease.
	ErrLost = errkind.New(sqlock.ErrLost, "etcdlock: lost")
	// ErrNotHeld: Release of a lock that was already released, or whose
	// lease the cluster no longer had (it expired: someone else may have
	// held the lock since); nothing changed.
	ErrNotHeld = errors.New("etcdlock: not held")
	// ErrInvalid: an empty or oversized name, or a TTL outside
	// [MinTTL, MaxTTL]. Nothing was sent.
	ErrInvalid = errkind.New(sqlock.ErrInvalidArgument, "etcdlock: invalid name or TTL")
)

// Error is the error type of this package.
type Error struct {
	Op    string // "acquire", "tryacquire", "hold", "release", "new"
	Name  string // the lock's name, "" when not applicable
	Err   error  // one of the sentinels above, or nil
	Cause error  // the underlying error (etcd, context, detail), or nil
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("etcdlock: ")
	b.WriteString(e.Op)
	if e.Name != "" {
		b.WriteString(" ")
		b.WriteString(quote(e.Name))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(e.Err.Error(), "etcdlock: "))
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

// quote shows a name in an error, cut to a readable length.
func quote(s string) string {
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
// request's failure.
func ctxError(op, name string, ctx context.Context, last error) error {
	timedOut, cause := ttllock.WaitEnd(ctx)
	if last != nil {
		cause = errors.Join(cause, last)
	}
	if timedOut {
		return &Error{Op: op, Name: name, Err: ErrTimeout, Cause: cause}
	}
	return &Error{Op: op, Name: name, Cause: cause}
}
