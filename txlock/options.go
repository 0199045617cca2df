package txlock

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
)

// DefaultTimeout bounds the wait for the locks unless WithTimeout says
// otherwise.
const DefaultTimeout = 5 * time.Second

// DefaultMaxAttempts is the default attempt limit, the first included.
const DefaultMaxAttempts = 5

// defaultPolicy is immutable after initialisation: a retry.Policy is safe
// for concurrent use and never changes after retry.New.
var defaultPolicy = retry.New(retry.WithMaxAttempts(DefaultMaxAttempts))

// Option configures one call of Do, DoPgx or Run.
type Option func(*config)

type config struct {
	err       error // the first invalid option, returned before anything is sent
	timeout   time.Duration
	shared    bool
	tryOnce   bool
	sqlOpts   *sql.TxOptions
	pgxOpts   pgx.TxOptions
	observer  observe.Observer
	policy    *retry.Policy
	retryOpts []retry.Option
	hasPolicy bool // WithRetryPolicy was given (policy may be nil: no retry)
}

func newConfig(opts []Option) config {
	c := config{timeout: DefaultTimeout, observer: observe.Nop{}}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// retryPolicy returns the policy the attempts run under: the one given by
// WithRetryPolicy, or the default (DefaultMaxAttempts attempts, retry's
// full-jitter backoff; 40001, 40P01 and stale versioned writes) plus any
// WithRetry options; nil
// for a single attempt.
func (c *config) retryPolicy() *retry.Policy {
	switch {
	case c.hasPolicy:
		return c.policy
	case len(c.retryOpts) == 0 && isNop(c.observer):
		return defaultPolicy
	}
	opts := make([]retry.Option, 0, len(c.retryOpts)+2)
	opts = append(opts, retry.WithMaxAttempts(DefaultMaxAttempts))
	if !isNop(c.observer) {
		opts = append(opts, retry.WithObserver(c.observer))
	}
	opts = append(opts, c.retryOpts...)
	return retry.New(opts...)
}

func isNop(o observe.Observer) bool {
	_, nop := o.(observe.Nop)
	return nop
}

// WithTimeout bounds the wait for the locks (default DefaultTimeout) with
// SET LOCAL lock_timeout: a wait that runs out returns a *LockError
// matching ErrTimeout, rolls back and leaves the connection healthy. The
// setting is transaction-scoped, so it never outlives the transaction, and
// it bounds every lock wait inside it, fn's statements included: a row lock
// fn waits for longer than d fails with SQLSTATE 55P03, returned as fn
// returns it. That is deliberate — while fn waits it holds the advisory
// lock and everyone queued behind it waits too. d must be positive (see
// Timeouts in the package documentation): zero or a negative d makes the
// call return an error matching ErrInvalidOption, with nothing sent.
// Durations are rounded up to whole milliseconds.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail(fmt.Errorf("%w: timeout %v must be positive", ErrInvalidOption, d))
			return
		}
		c.timeout = d
	}
}

// fail records the first invalid option.
func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// Shared takes the locks in shared mode (pg_advisory_xact_lock_shared):
// shared holders run together, an exclusive holder excludes them all.
func Shared() Option {
	return func(c *config) { c.shared = true }
}

// TryOnce does not wait: if any key is held elsewhere, the transaction is
// rolled back and a *LockError matching ErrNotAcquired is returned without
// running fn (pg_try_advisory_xact_lock). It is not retried unless a
// retry option asks for it.
func TryOnce() Option {
	return func(c *config) { c.tryOnce = true }
}

// WithTxOptions sets the isolation level and read-only mode of the
// database/sql transaction (Do, and Run adapters built on database/sql).
func WithTxOptions(o *sql.TxOptions) Option {
	return func(c *config) { c.sqlOpts = o }
}

// WithPgxTxOptions sets the pgx transaction modes (DoPgx). When BeginQuery
// or CommitQuery is set, BEGIN is sent as given and the locks follow in a
// statement of their own: one more round trip.
func WithPgxTxOptions(o pgx.TxOptions) Option {
	return func(c *config) { c.pgxOpts = o }
}

// WithRetry adds retry options to the default policy (DefaultMaxAttempts
// attempts; 40001, 40P01 and stale versioned writes retried with
// full-jitter backoff), e.g.
// retry.WithMaxAttempts(10) or retry.RetryLockTimeout(). Options given
// later win.
func WithRetry(opts ...retry.Option) Option {
	return func(c *config) { c.retryOpts = append(c.retryOpts, opts...) }
}

// WithRetryPolicy runs the attempts under p instead of the default policy;
// WithRetryPolicy(nil) makes one attempt only. A policy built once with
// retry.New is cheaper than WithRetry options on every call.
func WithRetryPolicy(p *retry.Policy) Option {
	return func(c *config) { c.policy, c.hasPolicy = p, true }
}

// WithoutRetry makes one attempt only: every error is returned as it is.
func WithoutRetry() Option { return WithRetryPolicy(nil) }

// WithObserver reports lock events (observe.LockAcquire with the outcome
// and the wait, observe.LockRelease with the hold time; Source "txlock")
// and, unless WithRetryPolicy is given, retries (observe.Retry) to o. If o
// panics, the transaction is rolled back (its locks and connection
// released) before the panic goes on. Several WithObserver options add up ([observe.Multi]); a nil o adds
// nothing. The same holds in every sqlock package: see [observe].
func WithObserver(o observe.Observer) Option {
	return func(c *config) { c.observer = observe.Multi(c.observer, o) }
}
