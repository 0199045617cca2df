package retry

import (
	"context"
	"errors"
	"fmt"
	"github.com/sqlock/sqlock/internal/mysqlerror"
	"math/rand/v2"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/observe"
)

// ErrExhausted is matched (errors.Is) by the error Do returns when the
// attempt limit or the time limit ran out, or the context ended while
// waiting to retry.
var ErrExhausted = errors.New("retry: gave up")

// Reason says why retrying stopped.
type Reason uint8

const (
	ReasonAttempts Reason = iota + 1 // the attempt limit was reached
	ReasonElapsed                    // the next wait would pass the time limit
	ReasonContext                    // the context ended while waiting
)

func (r Reason) String() string {
	switch r {
	case ReasonAttempts:
		return "attempt limit reached"
	case ReasonElapsed:
		return "time limit reached"
	case ReasonContext:
		return "context ended"
	}
	return "unknown"
}

// ExhaustedError is returned when a retryable failure could not be retried
// any more. It wraps the last error (and the context's error when the
// context ended). It is permanent: a retry around the call that returned it
// (an outer Do around txlock, gormplugin or sqlxhelpers transactions, which
// retry by themselves) returns it at once instead of running the inner
// retries again.
type ExhaustedError struct {
	Attempts int    // attempts made
	Reason   Reason // why it stopped
	Cause    string // the classification of the last error ("stale", "40001", …)
	Err      error  // the last error fn returned
	CtxErr   error  // the context's error, for ReasonContext
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("retry: gave up after %d attempts (%s): %v", e.Attempts, e.Reason, e.Err)
}

// Unwrap exposes the last error and, when set, the context's error.
func (e *ExhaustedError) Unwrap() []error {
	if e.CtxErr != nil {
		return []error{e.Err, e.CtxErr}
	}
	return []error{e.Err}
}

// Is matches ErrExhausted.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// Permanent reports true: the retries that could help have run. See
// IsPermanent.
func (e *ExhaustedError) Permanent() bool { return true }

// Rand is the source of jitter. *rand.Rand from math/rand/v2 satisfies it;
// the default uses math/rand/v2's global, goroutine-safe source. An injected
// Rand must be safe for the concurrency it is used with.
type Rand interface {
	Int64N(n int64) int64
}

type globalRand struct{}

func (globalRand) Int64N(n int64) int64 { return rand.Int64N(n) }

// Backoff computes the wait before the next attempt after attempt n (1-based)
// failed.
type Backoff interface {
	Delay(n int, r Rand) time.Duration
}

// BackoffFunc adapts a function to Backoff.
type BackoffFunc func(n int, r Rand) time.Duration

// Delay calls f.
func (f BackoffFunc) Delay(n int, r Rand) time.Duration { return f(n, r) }

type exponential struct{ base, max time.Duration }

// Exponential is exponential backoff with full jitter: after attempt n the
// wait is uniform in [0, min(limit, base·2^(n-1))]. Full jitter spreads
// competing retriers apart, which is what an optimistic hot row needs.
// A limit below base is raised to base. Both must be positive: WithBackoff
// of an Exponential with a zero or negative one is an [sqlock.ErrInvalidOption].
func Exponential(base, limit time.Duration) Backoff {
	if base <= 0 || limit <= 0 {
		return invalidBackoff{invalidErr("Exponential(%v, %v): base and limit must be positive", base, limit)}
	}
	return exponential{base: base, max: max(base, limit)}
}

// invalidBackoff is what a backoff constructor returns for bad input, so
// that WithBackoff can refuse it with the reason.
type invalidBackoff struct{ err error }

func (b invalidBackoff) Delay(int, Rand) time.Duration { return 0 }

func (e exponential) Delay(n int, r Rand) time.Duration {
	ceiling := e.max
	if shift := n - 1; shift < 62 {
		if d := e.base << shift; d > 0 && d < ceiling && d>>shift == e.base {
			ceiling = d
		}
	}
	return time.Duration(r.Int64N(int64(ceiling) + 1))
}

type constant time.Duration

// Constant waits d between attempts, without jitter; zero retries at once.
// A negative d makes WithBackoff an [sqlock.ErrInvalidOption].
func Constant(d time.Duration) Backoff {
	if d < 0 {
		return invalidBackoff{invalidErr("Constant(%v): a wait cannot be negative", d)}
	}
	return constant(d)
}

func (c constant) Delay(int, Rand) time.Duration { return time.Duration(c) }

const (
	defaultAttempts = 10
	defaultBase     = time.Millisecond
	defaultMax      = 100 * time.Millisecond
)

// Option configures a retry Policy. An invalid one — a limit that is zero
// or negative, a negative wait — makes Do and every other entry point return
// an error matching [sqlock.ErrInvalidOption] before running anything. As
// in every sqlock package, a duration that bounds something must be
// positive; leave an option out for its default.
type Option struct {
	apply func(*Policy)
	err   error // why the option is invalid; checked without applying it
}

func option(apply func(*Policy)) Option { return Option{apply: apply} }

func invalid(format string, args ...any) Option {
	return Option{err: invalidErr(format, args...)}
}

// errNilFunc is the error for a nil function: nothing to run.
var errNilFunc = errkind.New(sqlock.ErrNilHandle, "retry: nil function")

// invalidErr is the error of an invalid option: it matches
// sqlock.ErrInvalidOption.
func invalidErr(format string, args ...any) error {
	return errkind.New(sqlock.ErrInvalidOption, "retry: invalid option: "+format, args...)
}

// WithMaxAttempts limits the number of attempts, the first included
// (default 10). WithMaxAttempts(1) runs once and never retries; n < 1 is an
// [sqlock.ErrInvalidOption].
func WithMaxAttempts(n int) Option {
	if n < 1 {
		return invalid("WithMaxAttempts(%d): at least one attempt", n)
	}
	return option(func(p *Policy) { p.attempts = n })
}

// WithMaxElapsed stops retrying when the next wait would end more than d
// after Do started. Without it there is no time limit; the context's
// deadline applies in any case. A zero or negative d is an
// [sqlock.ErrInvalidOption].
func WithMaxElapsed(d time.Duration) Option {
	if d <= 0 {
		return invalid("WithMaxElapsed(%v): a time limit must be positive", d)
	}
	return option(func(p *Policy) { p.elapsed = d })
}

// WithBackoff sets the backoff policy (default Exponential(1ms, 100ms)). A
// nil Backoff restores the default.
func WithBackoff(b Backoff) Option {
	if ib, ok := b.(invalidBackoff); ok {
		return Option{err: ib.err}
	}
	return option(func(p *Policy) {
		if b == nil {
			b = exponential{base: defaultBase, max: defaultMax}
		}
		p.backoff = b
	})
}

// WithRand sets the jitter source, for deterministic tests. A nil Rand
// restores the default.
func WithRand(r Rand) Option {
	return option(func(p *Policy) {
		if r == nil {
			r = globalRand{}
		}
		p.rand = r
	})
}

// WithObserver reports each retry (observe.Retry with the attempt, the
// cause and the wait) to o. Several WithObserver options add up ([observe.Multi]); a nil o adds
// nothing. The same holds in every sqlock package: see [observe].
func WithObserver(o observe.Observer) Option {
	return option(func(p *Policy) { p.observer = observe.Multi(p.observer, o) })
}

// WithClassifier replaces the whole classification, Default included. The
// context rule stays: a cancelled or expired context is never retried.
func WithClassifier(c Classifier) Option {
	return option(func(p *Policy) {
		if c == nil {
			c = Default
		}
		p.classify = c
	})
}

// RetryIf adds a predicate: an error the classifier would not retry is
// retried when pred returns true, with pred's cause. Permanent errors and
// ended contexts are never retried, whatever pred says.
func RetryIf(pred Classifier) Option {
	return option(func(p *Policy) {
		if pred != nil {
			p.extra = append(p.extra, pred)
		}
	})
}

// RetryLockTimeout also retries SQLSTATE 55P03 (lock_timeout ran out) and
// MySQL's lock wait timeout (error 1205, cause "mysql:1205"). Neither is
// retried by default: the wait ran out, no conflict was lost, and on MySQL
// (innodb_rollback_on_timeout=OFF, the default) only the statement was
// rolled back while the transaction stays open — retry them only when the
// retried function runs the whole transaction.
func RetryLockTimeout() Option {
	return RetryIf(func(err error) (bool, string) {
		if n, _, _ := mysqlerror.Number(err); n == mysqlerror.LockWaitTimeout {
			return true, "mysql:1205"
		}
		return SQLState(err) == CodeLockNotAvailable, CodeLockNotAvailable
	})
}

// Policy is a reusable set of options. Build it once (New) and call Do on
// it from many goroutines; it is immutable after New.
type Policy struct {
	attempts int
	elapsed  time.Duration
	backoff  Backoff
	rand     Rand
	observer observe.Observer
	classify Classifier
	extra    []Classifier
	sleep    func(context.Context, time.Duration) error // tests replace it
	err      error                                      // the first invalid option's
}

// New builds a Policy from options.
func New(opts ...Option) *Policy {
	p := &Policy{}
	p.init(opts)
	return p
}

func (p *Policy) init(opts []Option) {
	*p = Policy{
		attempts: defaultAttempts,
		backoff:  exponential{base: defaultBase, max: defaultMax},
		rand:     globalRand{},
		observer: observe.Nop{},
		classify: Default,
		sleep:    sleep,
	}
	for _, o := range opts {
		if o.err != nil {
			p.err = o.err
			return
		}
		if o.apply != nil {
			o.apply(p)
		}
	}
}

// optionsErr is the first invalid option's error. It reads the options
// without applying them, so a first attempt that succeeds still costs
// nothing more.
func optionsErr(opts []Option) error {
	for _, o := range opts {
		if o.err != nil {
			return o.err
		}
	}
	return nil
}

// Do runs fn until it succeeds, fails with an error that is not retryable,
// or the limits run out. See the package documentation for what is retried.
// A nil fn is refused with an error matching [sqlock.ErrNilHandle].
func Do(ctx context.Context, fn func(context.Context) error, opts ...Option) error {
	if err := optionsErr(opts); err != nil {
		return err
	}
	if fn == nil {
		return errNilFunc
	}
	start := clockIf(len(opts) > 0) // only an option can set a time limit
	err := fn(ctx)
	if err == nil {
		return nil
	}
	var p Policy
	p.init(opts)
	return p.loop(ctx, fn, err, start)
}

// DoValue is Do for functions that return a value with their error. On
// failure it returns the zero T.
func DoValue[T any](ctx context.Context, fn func(context.Context) (T, error), opts ...Option) (T, error) {
	if err := optionsErr(opts); err != nil {
		var zero T
		return zero, err
	}
	if fn == nil {
		var zero T
		return zero, errNilFunc
	}
	start := clockIf(len(opts) > 0)
	v, err := fn(ctx)
	if err == nil {
		return v, nil
	}
	var p Policy
	p.init(opts)
	return doValue(ctx, &p, fn, err, start)
}

// Do runs fn under this policy, like the package-level Do.
func (p *Policy) Do(ctx context.Context, fn func(context.Context) error) error {
	if p.err != nil {
		return p.err
	}
	if fn == nil {
		return errNilFunc
	}
	start := clockIf(p.elapsed > 0)
	err := fn(ctx)
	if err == nil {
		return nil
	}
	return p.loop(ctx, fn, err, start)
}

// Wrap turns a repository method into one that retries under opts. The
// options are read once, here; each call of the result costs what Do costs.
//
//	getAndPay := retry.Wrap(repo.Pay, retry.WithMaxAttempts(5))
//	receipt, err := getAndPay(ctx, orderID)
func Wrap[In, Out any](f func(context.Context, In) (Out, error), opts ...Option) func(context.Context, In) (Out, error) {
	p := New(opts...)
	if p.err == nil && f == nil {
		p.err = errNilFunc
	}
	return func(ctx context.Context, in In) (Out, error) {
		if p.err != nil {
			var zero Out
			return zero, p.err
		}
		start := clockIf(p.elapsed > 0)
		out, err := f(ctx, in)
		if err == nil {
			return out, nil
		}
		return doValue(ctx, p, func(ctx context.Context) (Out, error) { return f(ctx, in) }, err, start)
	}
}

// WrapErr is Wrap for methods that return only an error.
func WrapErr[In any](f func(context.Context, In) error, opts ...Option) func(context.Context, In) error {
	p := New(opts...)
	if p.err == nil && f == nil {
		p.err = errNilFunc
	}
	return func(ctx context.Context, in In) error {
		if p.err != nil {
			return p.err
		}
		start := clockIf(p.elapsed > 0)
		err := f(ctx, in)
		if err == nil {
			return nil
		}
		return p.loop(ctx, func(ctx context.Context) error { return f(ctx, in) }, err, start)
	}
}

func doValue[T any](ctx context.Context, p *Policy, fn func(context.Context) (T, error), first error, start time.Time) (T, error) {
	var v T
	err := p.loop(ctx, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	}, first, start)
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// loop continues after the first attempt failed with err; start is when
// that attempt started, which the time limit counts from.
func (p *Policy) loop(ctx context.Context, fn func(context.Context) error, err error, start time.Time) error {
	for attempt := 1; ; attempt++ {
		retry, cause := p.shouldRetry(ctx, err)
		if !retry {
			return err
		}
		if attempt >= p.attempts {
			return &ExhaustedError{Attempts: attempt, Reason: ReasonAttempts, Cause: cause, Err: err}
		}
		wait := p.backoff.Delay(attempt, p.rand)
		if p.elapsed > 0 && time.Since(start)+wait > p.elapsed {
			return &ExhaustedError{Attempts: attempt, Reason: ReasonElapsed, Cause: cause, Err: err}
		}
		p.observer.Observe(ctx, observe.Event{Kind: observe.Retry, Source: "retry",
			Attempt: attempt, Cause: cause, Wait: wait, Err: err})
		if cerr := p.sleep(ctx, wait); cerr != nil {
			return &ExhaustedError{Attempts: attempt, Reason: ReasonContext, Cause: cause, Err: err, CtxErr: cerr}
		}
		if err = fn(ctx); err == nil {
			return nil
		}
	}
}

func (p *Policy) shouldRetry(ctx context.Context, err error) (bool, string) {
	if ctx.Err() != nil || isContextErr(err) || IsPermanent(err) {
		return false, ""
	}
	if ok, cause := p.classify(err); ok {
		return true, cause
	}
	for _, pred := range p.extra {
		if ok, cause := pred(err); ok {
			return true, cause
		}
	}
	return false, ""
}

// clockIf reads the clock when a time limit may apply, so that the time
// limit counts from the start of the first attempt; without one, a first
// attempt that succeeds costs no clock read. Options are read only after a
// failure, so Do with options always reads it.
func clockIf(limited bool) time.Time {
	if limited {
		return time.Now()
	}
	return time.Time{}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
