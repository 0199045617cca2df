package etcdlock

import (
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

// kit describes the package to the TTL-lock toolkit (internal/ttllock),
// whose Config holds the options every TTL lock has.
var kit = ttllock.Package{
	Name: "etcdlock", System: "etcd", Noun: "lock",
	Sentinels: sentinels,
	Error: func(op, name string, kind, cause error) error {
		return &Error{Op: op, Name: name, Err: kind, Cause: cause}
	},
	Margin: drift, MarginName: "drift allowance",
	RetryMin: retryMin, RetryMax: retryMax,
	DefaultTimeout: DefaultTimeout,
	BoundTry:       true, // WithTimeout bounds the cluster's answer to a try too
}

type config struct {
	ttllock.Config // the timeout and the observer
	prefix         string
	sharedLease    bool
}

// Option configures a Locker.
type Option func(*config) error

// WithTimeout bounds every acquisition (default [DefaultTimeout]): Acquire's
// wait for the lock, and TryAcquire's for the cluster's answer; a context
// deadline that comes earlier wins. It must be positive (zero or negative:
// an error matching [sqlock.ErrInvalidOption]): no wait is unbounded.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error { return c.SetTimeout(d) }
}

// WithMaxHold caps how long any lock of the Locker is held: Lost fires
// once d has passed since it was acquired, however often its lease was
// kept alive (its error matches [ErrLost] and says so), and the
// keepalives stop, so the cluster expires the lease one TTL later unless
// Release revokes it first. It must be positive (otherwise an error
// matching [sqlock.ErrInvalidOption]); the default is no cap.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) error { return c.SetMaxHold(d) }
}

// WithSharedLease makes the Locker's locks of one TTL share a lease, as
// etcd's concurrency.Session shares one among its mutexes: an acquisition
// of a free name is then one Txn, and a release one owner-checked delete
// of the lock's key — the round trips of a Mutex on a long-lived session
// — instead of a lease granted and revoked per lock. Each lock still
// keeps the lease alive every TTL/3 and is trusted, and Lost, on its own
// confirmed keepalives; a lease the cluster no longer has (revoked, or
// expired with every lock on it unable to keep it) loses every lock on it,
// and the next acquisition grants another. The default is a lease per
// lock: see docs/etcdlock.md for the trade.
func WithSharedLease() Option {
	return func(c *config) error {
		c.sharedLease = true
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
// tried again (observe.Retry, cause "renew") to o, with Source "etcdlock",
// System "etcd" and the lock's name as Name. Several WithObserver options add up
// ([observe.Multi]); a nil o adds nothing.
func WithObserver(o observe.Observer) Option {
	return func(c *config) error {
		c.AddObserver(o)
		return nil
	}
}

func buildConfig(opts []Option) (config, error) {
	c := config{Config: kit.NewConfig(), prefix: DefaultPrefix}
	if err := ttllock.Apply(&c, opts); err != nil {
		return c, err
	}
	if !strings.HasSuffix(c.prefix, "/") {
		c.prefix += "/"
	}
	return c, nil
}
