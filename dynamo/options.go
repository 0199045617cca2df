package dynamo

import (
	"time"

	"github.com/sqlock/sqlock/internal/ttllock"
	"github.com/sqlock/sqlock/observe"
)

// DefaultTimeout bounds Acquire's wait unless WithTimeout says otherwise.
// A lock whose holder vanished without releasing it is taken over only
// after the waiter has watched it unchanged for its whole TTL, so a wait
// bound shorter than the TTLs in use can end before a takeover.
const DefaultTimeout = 5 * time.Second

type config struct {
	ttllock.Config // the timeout and the observer
}

// Option configures a Locker.
type Option func(*config) error

// WithTimeout bounds every Acquire's wait (default [DefaultTimeout]); a
// context deadline that comes earlier wins. It must be positive (zero or
// negative: an error matching [sqlock.ErrInvalidOption]): no wait is
// unbounded, and TryAcquire does not wait.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error { return c.SetTimeout(d) }
}

// WithObserver reports each acquisition (observe.LockAcquire with the
// outcome and the wait), each lock's end (observe.LockRelease: Released, or
// Lost, with the hold time) and each renewal that failed and will be tried
// again (observe.Retry, cause "renew") to o, with Source "dynamo", System
// "aws.dynamodb" and the lock's name as Name. Several WithObserver options
// add up ([observe.Multi]); a nil o adds nothing.
func WithObserver(o observe.Observer) Option {
	return func(c *config) error {
		c.AddObserver(o)
		return nil
	}
}

func buildConfig(opts []Option) (config, error) {
	c := config{Config: kit.NewConfig()}
	err := ttllock.Apply(&c, opts)
	return c, err
}
