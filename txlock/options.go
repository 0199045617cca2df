package txlock

import (
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
)

// Option configures one call of Do or DoPgx (and of gormplugin.Transaction
// and sqlxhelpers.Do, which take txlock's options).
type Option func(*lockedtx.Config)

// AlsoLock locks keys too, besides the call's own: all of them are locked
// in one canonical order (advisory.Key.Compare), duplicates once, so
// transactions asking for overlapping sets in any order cannot deadlock on
// each other's locks.
//
//	txlock.Do(ctx, db, from, fn, txlock.AlsoLock(to))
func AlsoLock(keys ...advisory.Key) Option {
	return func(c *lockedtx.Config) { c.More = append(c.More, keys...) }
}

// WithTimeout bounds the wait for the locks (default 5 s) with SET LOCAL
// lock_timeout: a wait that runs out returns an error matching ErrTimeout,
// rolls back and leaves the connection healthy. The setting is
// transaction-scoped, so it never outlives the transaction, and it bounds
// every lock wait inside it, fn's statements included: a row lock fn waits
// for longer than d fails with SQLSTATE 55P03, returned as fn returns it.
// That is deliberate — while fn waits it holds the advisory lock and
// everyone queued behind it waits too. d must be positive: zero or a
// negative d makes the call return an error matching
// sqlock.ErrInvalidOption, with nothing sent (not to wait at all, use
// TryOnce). Durations are rounded up to whole milliseconds.
func WithTimeout(d time.Duration) Option {
	return func(c *lockedtx.Config) {
		if d <= 0 {
			c.Fail(errkind.New(sqlock.ErrInvalidOption, "txlock: WithTimeout: timeout %v must be positive", d))
			return
		}
		c.Timeout = d
	}
}

// Shared takes the locks in shared mode (pg_advisory_xact_lock_shared):
// shared holders run together, an exclusive holder excludes them all.
func Shared() Option {
	return func(c *lockedtx.Config) { c.Shared = true }
}

// TryOnce does not wait: if any key is held elsewhere, the transaction is
// rolled back and an error matching ErrNotAcquired is returned without
// running fn (pg_try_advisory_xact_lock). It is not retried unless a
// retry option asks for it.
func TryOnce() Option {
	return func(c *lockedtx.Config) { c.TryOnce = true }
}

// WithTxOptions sets the isolation level and read-only mode of the
// database/sql transaction (Do, gormplugin.Transaction, sqlxhelpers.Do).
func WithTxOptions(o *sql.TxOptions) Option {
	return func(c *lockedtx.Config) { c.SQLOpts = o }
}

// WithPgxTxOptions sets the pgx transaction modes (DoPgx). A mode
// PostgreSQL does not know makes the call return an error matching
// sqlock.ErrInvalidOption, with nothing sent. When BeginQuery is set,
// BEGIN is sent as given and the locks follow in a statement of their own:
// one more round trip.
func WithPgxTxOptions(o pgx.TxOptions) Option {
	return func(c *lockedtx.Config) { c.PgxOpts = o }
}

// WithRetry adds retry options to the default policy (5 attempts in all;
// 40001, 40P01 and stale versioned writes retried with full-jitter
// backoff), e.g. retry.WithMaxAttempts(10) or retry.RetryLockTimeout().
// Options given later win.
func WithRetry(opts ...retry.Option) Option {
	return func(c *lockedtx.Config) { c.RetryOpts = append(c.RetryOpts, opts...) }
}

// WithoutRetry makes one attempt only: every error is returned as it is.
// It wins over WithRetry.
func WithoutRetry() Option {
	return func(c *lockedtx.Config) { c.NoRetry = true }
}

// WithObserver reports lock events (observe.LockAcquire with the outcome
// and the wait, observe.LockRelease with the hold time; Source "txlock",
// System "postgresql") and retries (observe.Retry) to o. If o panics, the
// transaction is rolled back (its locks and connection released) before
// the panic goes on.
// Several WithObserver options add up ([observe.Multi]); a nil o adds
// nothing. The same holds in every sqlock package: see [observe].
func WithObserver(o observe.Observer) Option {
	return func(c *lockedtx.Config) { c.Observer = observe.Multi(c.Observer, o) }
}
