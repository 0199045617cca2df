package redislock

import (
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errs"
)

// DefaultTimeout bounds Acquire's wait unless WithTimeout says otherwise.
const DefaultTimeout = 5 * time.Second

type config struct {
	timeout time.Duration
}

// Option configures a Locker or a Redlock.
type Option func(*config) error

// WithTimeout bounds every Acquire's wait (default [DefaultTimeout]); a
// context deadline that comes earlier wins. It must be positive (zero or
// negative: an error matching [sqlock.ErrInvalidOption]): no wait is
// unbounded, and TryAcquire does not wait.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errs.New(sqlock.ErrInvalidOption, "redislock: timeout %v must be positive", d)
		}
		c.timeout = d
		return nil
	}
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
