package advisory

import (
	"context"
	"errors"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

// Errors. Every error this package returns is an *Error carrying the
// operation, the key and the underlying cause, and matches one of these with
// errors.Is, a context error (context.Canceled), or one of the shared
// refusals of package sqlock: [sqlock.ErrNilHandle] (a nil handle or
// function), [sqlock.ErrInvalidOption] (an option out of range) and
// [sqlock.ErrUnsupported] (a server or pooler where session advisory locks
// are not real: see [Locker.Verify]). ErrTimeout, ErrNotAcquired and ErrLost
// also match sqlock's of the same name, as every lock backend's do.
var (
	// ErrTimeout: the wait ran out — the Locker's wait timeout, or the
	// deadline of the caller's context (then the error also matches
	// context.DeadlineExceeded). The server's lock_timeout (SQLSTATE 55P03)
	// enforces it. A wait that ran out before the lock statement was sent,
	// waiting for a connection, is ErrConnTimeout, which matches ErrTimeout.
	ErrTimeout = errkind.New(sqlock.ErrTimeout, "advisory: timed out waiting for the lock")
	// ErrConnTimeout: the wait ran out before it reached the lock, waiting
	// for a connection — from the pool (all of its connections in use, or
	// one being dialled), or of the shared set ([WithMultiplexing]). It
	// matches ErrTimeout (and so sqlock.ErrTimeout); the message says which
	// connection it waited for.
	ErrConnTimeout = errkind.New(ErrTimeout, "advisory: timed out waiting for a connection")
	// ErrNotAcquired: a try-once (TryLock, TryRLock) found the lock held
	// elsewhere.
	ErrNotAcquired = errkind.New(sqlock.ErrNotAcquired, "advisory: lock is held elsewhere")
	// ErrDeadlock: the server chose this waiter as a deadlock victim
	// (SQLSTATE 40P01).
	ErrDeadlock = errors.New("advisory: deadlock detected (SQLSTATE 40P01)")
	// ErrAlreadyHeld: the context already carries a hold of this key from
	// this Locker (inside Do, or a context from Lock.Context), or, through
	// the same pool in a conflicting mode, from another Locker or a txlock
	// transaction. Locks are not re-entrant: see the package documentation.
	ErrAlreadyHeld = errors.New("advisory: key already held in this context")
	// ErrLost: the lock's session ended — its connection died, the server
	// ended it, or an unlock could not be confirmed (then the connection was
	// closed, which ends the session and so releases the lock).
	ErrLost = errkind.New(sqlock.ErrLost, "advisory: lock lost: its session ended")
	// ErrNotHeld: Release of a Lock that was already released.
	ErrNotHeld = errors.New("advisory: lock not held (already released)")
	// ErrUnavailable: no working connection — the pool could not connect, or
	// the connection broke during the call. Nothing is held.
	ErrUnavailable = errors.New("advisory: database unavailable")
)

// The package's wording of the shared refusals.
var (
	errNilHandle   = errkind.New(sqlock.ErrNilHandle, "advisory: nil database handle")
	errNilFunc     = errkind.New(sqlock.ErrNilHandle, "advisory: nil function")
	errUnsupported = errkind.New(sqlock.ErrUnsupported, "advisory: session advisory locks are not supported here")
)

// invalidOption is the error of an option out of range.
func invalidOption(format string, args ...any) error {
	return errkind.New(sqlock.ErrInvalidOption, "advisory: invalid option: "+format, args...)
}

// Error is the error type of this package.
type Error struct {
	Op    string // "lock", "trylock", "rlock", "tryrlock", "release", "do", "verify", "new"
	Key   Key    // the zero Key when not applicable
	Err   error  // one of the Err* values above, an error matching a sqlock sentinel, or nil
	Cause error  // the underlying error (driver, server, context), or nil
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("advisory: ")
	b.WriteString(e.Op)
	if e.Key.Valid() {
		b.WriteString(" ")
		b.WriteString(e.Key.String())
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(e.Err.Error(), "advisory: "))
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
	errs := make([]error, 0, 2)
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// ctxError turns the end of the caller's context into an error: a deadline
// is a timeout (matching both ErrTimeout and context.DeadlineExceeded), a
// cancellation is context.Canceled (or the context's cause).
func ctxError(op string, k Key, ctx context.Context) *Error {
	cause := context.Cause(ctx)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Op: op, Key: k, Err: ErrTimeout, Cause: cause}
	}
	return &Error{Op: op, Key: k, Cause: cause}
}
