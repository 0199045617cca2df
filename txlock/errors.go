package txlock

import "github.com/sqlock/sqlock/internal/lockedtx"

// Errors about the locks and the outcome of a transaction. Bad input is
// refused before anything is sent, with an error matching one of package
// sqlock's sentinels: sqlock.ErrNilHandle for a nil handle or function,
// sqlock.ErrInvalidOption for an option out of range (its text names the
// option), and advisory.ErrInvalidKey for an invalid key.
var (
	// ErrTimeout is matched by the error returned when the wait for a
	// lock ran out ([WithTimeout]; SQLSTATE 55P03, which the error wraps).
	// fn did not run. It also matches advisory.ErrTimeout and sqlock.ErrTimeout, and
	// context.DeadlineExceeded when the context's deadline set the bound
	// (then it is never retried: see docs/txlock.md). Otherwise it is not
	// retried unless asked, e.g. with [WithRetry](retry.RetryLockTimeout()).
	ErrTimeout = lockedtx.ErrTimeout
	// ErrNotAcquired is matched by the error returned with [TryOnce] when a
	// key was held elsewhere. fn did not run. It also matches
	// advisory.ErrNotAcquired and sqlock.ErrNotAcquired.
	ErrNotAcquired = lockedtx.ErrNotAcquired
	// ErrAlreadyHeld is matched by the error for a transaction asked for
	// with a context that carries a lock of the same key taken through the
	// same database handle, in a conflicting mode (either is exclusive):
	// from inside another transaction's fn, or inside advisory.Do (session
	// and transaction locks share one lock space). The inner transaction
	// would run on another connection and wait for the outer one's lock
	// while the outer one waits for fn to return: a deadlock PostgreSQL
	// cannot see, ended only by the timeout. Nothing is sent. It also
	// matches advisory.ErrAlreadyHeld.
	ErrAlreadyHeld = lockedtx.ErrAlreadyHeld
	// ErrAmbiguousCommit is matched by the error returned when COMMIT was
	// sent and no answer came back (the connection broke, the context
	// ended or the server ended the session while COMMIT was in flight),
	// so the transaction may or may not have committed; the driver's error
	// is wrapped. It is never retried: check before doing the work again.
	ErrAmbiguousCommit = lockedtx.ErrAmbiguousCommit
)
