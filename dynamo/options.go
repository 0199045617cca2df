package dynamo

import (
	"context"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
	"github.com/sqlock/sqlock/observe"
)

// DefaultTimeout bounds Acquire's wait unless WithTimeout says otherwise.
// A lock whose holder vanished without releasing it is taken over only
// after the waiter has watched it unchanged for its whole TTL, so a wait
// bound shorter than the TTLs in use can end before a takeover.
const DefaultTimeout = 5 * time.Second

type config struct {
	timeout time.Duration
	obs     observe.Observer // nil: none
}

// Option configures a Locker.
type Option func(*config) error

// WithTimeout bounds every Acquire's wait (default [DefaultTimeout]); a
// context deadline that comes earlier wins. It must be positive (zero or
// negative: an error matching [sqlock.ErrInvalidOption]): no wait is
// unbounded, and TryAcquire does not wait.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errkind.New(sqlock.ErrInvalidOption, "dynamo: timeout %v must be positive", d)
		}
		c.timeout = d
		return nil
	}
}

// WithObserver reports each acquisition (observe.LockAcquire with the
// outcome and the wait), each lock's end (observe.LockRelease: Released, or
// Lost, with the hold time) and each renewal that failed and will be tried
// again (observe.Retry, cause "renew") to o, with Source "dynamo", System
// "aws.dynamodb" and the lock's name as Name. Several WithObserver options
// add up ([observe.Multi]); a nil o adds nothing.
func WithObserver(o observe.Observer) Option {
	return func(c *config) error {
		c.obs = observe.Multi(c.obs, o)
		return nil
	}
}

// event is the observer event of the lock called name.
func event(name string) observe.Event {
	return observe.Event{Source: "dynamo", System: "aws.dynamodb", Name: name}
}

// observeFailure reports an acquisition that began at start and failed
// (a granted one is reported as it is armed).
func (c *config) observeFailure(ctx context.Context, name string, start time.Time, err error) {
	ttllock.ObserveFailure(ctx, c.obs, event(name), start, err, ErrInvalid)
}

func buildConfig(opts []Option) (config, error) {
	c := config{timeout: DefaultTimeout}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}
