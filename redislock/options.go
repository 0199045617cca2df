package redislock

import (
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
	"github.com/sqlock/sqlock/observe"
)

// DefaultTimeout bounds Acquire's wait unless WithTimeout says otherwise.
const DefaultTimeout = 5 * time.Second

type config struct {
	ttllock.Config // the timeout, the maximum hold, the observer

	replicas replicas // WithReplicas; zero: no wait
	info     info     // WithHolder, WithPayload; zero: none stored
}

// Option configures a Locker or a Redlock.
type Option func(*config) error

// WithTimeout bounds every Acquire's wait (default [DefaultTimeout]); a
// context deadline that comes earlier wins. It must be positive (zero or
// negative: an error matching [sqlock.ErrInvalidOption]): no wait is
// unbounded, and TryAcquire does not wait.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error { return c.SetTimeout(d) }
}

// WithMaxHold caps how long any lock of the Locker or Redlock is held:
// Lost fires once d has passed since it was acquired, however often it
// was renewed (its error matches [ErrLost] and says so). It must be
// positive; the default is no cap.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) error { return c.SetMaxHold(d) }
}

// WithObserver reports each acquisition (observe.LockAcquire with the
// outcome and the wait), each lock's end (observe.LockRelease: Released, or
// Lost, with the hold time) and each renewal that failed and will be tried
// again (observe.Retry, cause "renew") to o, with Source "redislock",
// System "redis" and the lock's key as Name. Several WithObserver options
// add up ([observe.Multi]); a nil o adds nothing.
func WithObserver(o observe.Observer) Option {
	return func(c *config) error {
		c.AddObserver(o)
		return nil
	}
}

// oneServerOnly refuses, for a Redlock, the options of a Locker on one
// server: its servers are independent masters (no replicas to wait for),
// and it stores nothing beside the key.
func (c *config) oneServerOnly() error {
	switch {
	case c.replicas.n > 0:
		return errkind.New(sqlock.ErrUnsupported, "redislock: WithReplicas is a Locker's option: a Redlock's servers are independent masters")
	case c.info.set:
		return errkind.New(sqlock.ErrUnsupported, "redislock: WithHolder and WithPayload are a Locker's options, not a Redlock's")
	}
	return nil
}

func buildConfig(opts []Option) (config, error) {
	c := config{Config: kit.NewConfig()}
	err := ttllock.Apply(&c, opts)
	return c, err
}
