package lockedtx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/errkind"
)

// The sentinels package txlock exports (txlock.ErrTimeout is ErrTimeout,
// and so on): declared here, where the errors that match them are made.
// Each one that has a counterpart in package advisory matches it too, so
// errors.Is(err, advisory.ErrTimeout) holds for a txlock timeout.
var (
	ErrTimeout         = errkind.New(advisory.ErrTimeout, "txlock: timed out waiting for an advisory lock")
	ErrNotAcquired     = errkind.New(advisory.ErrNotAcquired, "txlock: advisory lock held elsewhere")
	ErrAlreadyHeld     = errkind.New(advisory.ErrAlreadyHeld, "txlock: advisory lock held by an enclosing transaction")
	ErrAmbiguousCommit = errors.New("txlock: outcome of COMMIT unknown")
)

// Errors for input refused before anything reaches the database; they
// match sqlock.ErrNilHandle.
var (
	ErrNilDB   = errkind.New(sqlock.ErrNilHandle, "txlock: nil database handle")
	ErrNilFunc = errkind.New(sqlock.ErrNilHandle, "txlock: nil function")
)

// LockError reports that the advisory locks were not taken, so the
// function did not run and the transaction was rolled back. It matches
// ErrTimeout (the wait ran out) or ErrNotAcquired (TryOnce found a key held
// elsewhere), and context.DeadlineExceeded when the caller's deadline set
// the wait's bound (then it is not retried).
type LockError struct {
	Keys    []advisory.Key // the keys asked for, in the order they are locked
	Shared  bool           // shared locks were asked for
	TryOnce bool           // TryOnce: no wait (ErrNotAcquired); otherwise ErrTimeout
	Timeout time.Duration  // the wait bound in force
	Wait    time.Duration  // time from BEGIN to the failure
	// Err is the server's error for a timeout: SQLSTATE 55P03
	// (lock_not_available), so retry.SQLState and retry.RetryLockTimeout
	// see it. It is nil for TryOnce, and when the deadline left no time
	// to wait (then nothing was sent).
	Err        error
	ByDeadline bool // the caller's deadline set the bound
}

func (e *LockError) Error() string {
	var b strings.Builder
	b.WriteString("txlock: ")
	switch {
	case e.TryOnce:
		b.WriteString("advisory lock held elsewhere")
	case e.ByDeadline && e.Err == nil:
		b.WriteString("no time left before the context's deadline to wait for an advisory lock")
	case e.ByDeadline:
		fmt.Fprintf(&b, "timed out after %v (the context's deadline less what the transaction needs) waiting for an advisory lock", e.Timeout)
	default:
		fmt.Fprintf(&b, "timed out after %v waiting for an advisory lock", e.Timeout)
	}
	b.WriteString(" (")
	for i, k := range e.Keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k.String())
	}
	if e.Shared {
		b.WriteString(", shared")
	}
	b.WriteString(")")
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Is matches ErrNotAcquired (TryOnce) or ErrTimeout, each with what it
// matches in turn (advisory's), and context.DeadlineExceeded when the
// caller's deadline set the bound.
func (e *LockError) Is(target error) bool {
	if e.TryOnce {
		return errors.Is(ErrNotAcquired, target)
	}
	return errors.Is(ErrTimeout, target) || e.ByDeadline && target == context.DeadlineExceeded
}

// Unwrap returns the server's error (nil for TryOnce).
func (e *LockError) Unwrap() error { return e.Err }

// AmbiguousCommitError is returned when COMMIT was sent but its outcome is
// unknown: the connection was lost or the context ended while COMMIT was in
// flight, or the server ended the session (FATAL) while committing. It
// matches ErrAmbiguousCommit and is never retried: Permanent reports true.
type AmbiguousCommitError struct {
	Err error // what the driver returned for COMMIT
}

func (e *AmbiguousCommitError) Error() string {
	return "txlock: outcome of COMMIT unknown (it may or may not have committed): " + e.Err.Error()
}

// Is matches ErrAmbiguousCommit.
func (e *AmbiguousCommitError) Is(target error) bool { return target == ErrAmbiguousCommit }

// Unwrap returns the driver's error.
func (e *AmbiguousCommitError) Unwrap() error { return e.Err }

// Permanent reports true: retry never runs a transaction again whose COMMIT
// may have succeeded.
func (e *AmbiguousCommitError) Permanent() bool { return true }

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
