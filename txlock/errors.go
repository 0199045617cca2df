package txlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
)

// Errors for input that is refused before anything reaches the database.
var (
	// ErrNilDB is returned when the database handle is nil.
	ErrNilDB = errors.New("txlock: nil database handle")
	// ErrNilFunc is returned when the function to run is nil (or, for Run,
	// the begin function is).
	ErrNilFunc = errors.New("txlock: nil function")
	// ErrNoKeys is returned when no key is given. An invalid key is reported
	// with an error that matches advisory.ErrInvalidKey.
	ErrNoKeys = errors.New("txlock: no lock keys")
	// ErrInvalidOption is matched by the error for an option out of range,
	// such as a timeout that is not positive. It also matches
	// sqlock.ErrInvalidOption: one meaning for the library's options.
	ErrInvalidOption = fmt.Errorf("txlock: invalid option: %w", sqlock.ErrInvalidOption)
)

// Errors about the locks and the outcome of a transaction.
var (
	// ErrTimeout is matched (errors.Is) by the *LockError returned when the
	// wait for a lock ran out (WithTimeout; SQLSTATE 55P03). It is not
	// retried unless asked, e.g. with WithRetry(retry.RetryLockTimeout()).
	ErrTimeout = errors.New("txlock: timed out waiting for an advisory lock")
	// ErrNotAcquired is matched by the *LockError returned with TryOnce when
	// a key was held elsewhere. The function did not run.
	ErrNotAcquired = errors.New("txlock: advisory lock held elsewhere")
	// ErrAlreadyHeld is matched by the error for a transaction asked for
	// (Do, DoKeys, DoPgx, DoPgxKeys) with a context that carries a lock of
	// the same key taken through the same database handle, in a conflicting
	// mode (either is exclusive): from inside another transaction's fn, or
	// inside advisory.Do (session and transaction locks share one lock
	// space). The inner transaction would run on another connection and
	// wait for the outer one's lock while the outer one waits for fn to
	// return: a deadlock PostgreSQL cannot see, ended only by the timeout.
	// Nothing is sent. It also matches
	// advisory.ErrAlreadyHeld.
	ErrAlreadyHeld = fmt.Errorf("txlock: advisory lock held by an enclosing transaction: %w", advisory.ErrAlreadyHeld)
	// ErrAmbiguousCommit is matched by *AmbiguousCommitError: COMMIT was sent
	// and no answer came back, so the transaction may or may not have
	// committed. It is never retried.
	ErrAmbiguousCommit = errors.New("txlock: outcome of COMMIT unknown")
)

// LockError reports that the advisory locks were not taken, so the
// function did not run and the transaction was rolled back. It matches
// ErrTimeout (the wait ran out) or ErrNotAcquired (TryOnce found a key held
// elsewhere). When the caller's context deadline set the wait's bound (see
// Deadlines in the package documentation) it also matches
// context.DeadlineExceeded, and is not retried.
type LockError struct {
	Keys    []advisory.Key // the keys asked for, in the order they are locked
	Shared  bool           // shared locks were asked for
	TryOnce bool           // TryOnce: no wait (ErrNotAcquired); otherwise ErrTimeout
	Timeout time.Duration  // the wait bound in force (WithTimeout)
	Wait    time.Duration  // time from BEGIN to the failure
	// Err is the server's error for a timeout: SQLSTATE 55P03
	// (lock_not_available), so retry.SQLState and retry.RetryLockTimeout
	// see it. It is nil for TryOnce, and when the deadline left no time
	// to wait (then nothing was sent).
	Err error

	byDeadline bool // the caller's deadline set the bound
}

func (e *LockError) Error() string {
	var b strings.Builder
	b.WriteString("txlock: ")
	switch {
	case e.TryOnce:
		b.WriteString("advisory lock held elsewhere")
	case e.byDeadline && e.Err == nil:
		b.WriteString("no time left before the context's deadline to wait for an advisory lock")
	case e.byDeadline:
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

// Is matches ErrTimeout or ErrNotAcquired, and context.DeadlineExceeded
// when the caller's deadline set the bound.
func (e *LockError) Is(target error) bool {
	if e.TryOnce {
		return target == ErrNotAcquired
	}
	return target == ErrTimeout || e.byDeadline && target == context.DeadlineExceeded
}

// Unwrap returns the server's error (nil for TryOnce).
func (e *LockError) Unwrap() error { return e.Err }

// AmbiguousCommitError is returned when COMMIT was sent but its outcome is
// unknown: the connection was lost or the context ended while COMMIT was in
// flight, or the server ended the session (FATAL) while committing. The
// transaction may have committed or not; check before doing it again. It
// is never retried: Permanent reports true.
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
