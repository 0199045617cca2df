package etcdlock

import (
	"context"
	"strings"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
	"github.com/sqlock/sqlock/observe"
)

// DefaultTimeout bounds Acquire's wait unless WithTimeout says otherwise.
const DefaultTimeout = 5 * time.Second

// DefaultPrefix begins the key of every lock unless WithPrefix says
// otherwise.
const DefaultPrefix = "sqlock/"

type config struct {
	timeout time.Duration
	prefix  string
	obs     observe.Observer // nil: none
}

// Option configures a Locker.
type Option func(*config) error

// WithTimeout bounds every acquisition (default [DefaultTimeout]): Acquire's
// wait for the lock, and TryAcquire's for the cluster's answer; a context
// deadline that comes earlier wins. It must be positive (zero or negative:
// an error matching [sqlock.ErrInvalidOption]): no wait is unbounded.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errkind.New(sqlock.ErrInvalidOption, "etcdlock: timeout %v must be positive", d)
		}
		c.timeout = d
		return nil
	}
}

// WithPrefix puts the Locker's keys under prefix (default
// [DefaultPrefix]): the lock called name is the keys under
// prefix + name + "/", one per holder and waiter. Lockers with different
// prefixes never exclude each other. It must be non-empty (an error
// matching [sqlock.ErrInvalidOption]).
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" {
			return errkind.New(sqlock.ErrInvalidOption, "etcdlock: empty key prefix")
		}
		c.prefix = prefix
		return nil
	}
}

// WithObserver reports each acquisition (observe.LockAcquire with the
// outcome and the wait), each lock's end (observe.LockRelease: Released, or
// Lost, with the hold time) and each keepalive that failed and will be
// tried again (observe.Retry, cause "renew") to o, with Source "etcdlock"
// and the lock's name as Name. Several WithObserver options add up
// ([observe.Multi]); a nil o adds nothing.
func WithObserver(o observe.Observer) Option {
	return func(c *config) error {
		c.obs = observe.Multi(c.obs, o)
		return nil
	}
}

// observeFailure reports an acquisition that began at start and failed (a
// granted one is reported as it is armed).
func (c *config) observeFailure(ctx context.Context, name string, start time.Time, err error) {
	ttllock.ObserveFailure(ctx, c.obs, observe.Event{Source: "etcdlock", Name: name}, start, err, ErrInvalid)
}

func buildConfig(opts []Option) (config, error) {
	c := config{timeout: DefaultTimeout, prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	if !strings.HasSuffix(c.prefix, "/") {
		c.prefix += "/"
	}
	return c, nil
}
