package lockedtx

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
)

// defaultTimeout bounds the wait for the locks unless txlock.WithTimeout
// says otherwise.
const defaultTimeout = 5 * time.Second

// DefaultMaxAttempts is the default attempt limit, the first included.
const DefaultMaxAttempts = 5

// defaultPolicy is immutable after initialisation: a retry.Policy is safe
// for concurrent use and never changes after retry.New.
var defaultPolicy = retry.New(retry.WithMaxAttempts(DefaultMaxAttempts))

// Config is one call's configuration, set by package txlock's options
// (txlock.Option is a func(*Config)).
type Config struct {
	Err       error          // the first invalid option, returned before anything is sent
	Timeout   time.Duration  // positive
	Shared    bool           // shared locks
	TryOnce   bool           // no wait
	More      []advisory.Key // keys to lock besides the call's own (txlock.AlsoLock)
	SQLOpts   *sql.TxOptions // database/sql transaction options (may be nil)
	PgxOpts   pgx.TxOptions  // pgx transaction modes
	Observer  observe.Observer
	RetryOpts []retry.Option // added to the default policy
	NoRetry   bool           // one attempt only
	// Unlocked, when set, is the first attempt: it runs with no
	// transaction and no lock, and only the attempts after a conflict it
	// returns take the locks (txlock.DoOptimistic).
	Unlocked func(context.Context) error
	// Hot, if set (with Unlocked), makes a new call's first attempt a
	// locked one while the key is hot among the calls sharing it.
	Hot *HotKeys
}

// Fail records the first invalid option.
func (c *Config) Fail(err error) {
	if c.Err == nil {
		c.Err = err
	}
}

func newConfig[O ~func(*Config)](opts []O) Config {
	c := Config{Timeout: defaultTimeout, Observer: observe.Nop{}}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// unlockedPolicy is defaultPolicy without backoff, for a call whose first
// attempt is unlocked: every later attempt waits in the lock's queue on the
// server, which is the backoff.
var unlockedPolicy = retry.New(retry.WithMaxAttempts(DefaultMaxAttempts), retry.WithBackoff(retry.Constant(0)))

// retryPolicy returns the policy the attempts run under: nil for a single
// attempt (NoRetry), else the default (DefaultMaxAttempts attempts, retry's
// full-jitter backoff — none when the first attempt is Unlocked; 40001,
// 40P01 and stale versioned writes) plus the observer and any RetryOpts.
func (c *Config) retryPolicy() *retry.Policy {
	switch {
	case c.NoRetry:
		return nil
	case len(c.RetryOpts) == 0 && isNop(c.Observer) && c.Unlocked != nil:
		return unlockedPolicy
	case len(c.RetryOpts) == 0 && isNop(c.Observer):
		return defaultPolicy
	}
	opts := make([]retry.Option, 0, len(c.RetryOpts)+3)
	opts = append(opts, retry.WithMaxAttempts(DefaultMaxAttempts))
	if c.Unlocked != nil {
		opts = append(opts, retry.WithBackoff(retry.Constant(0)))
	}
	if !isNop(c.Observer) {
		opts = append(opts, retry.WithObserver(c.Observer))
	}
	opts = append(opts, c.RetryOpts...)
	return retry.New(opts...)
}

func isNop(o observe.Observer) bool {
	_, nop := o.(observe.Nop)
	return nop
}

// observe reports e once per key of p.
func (c *Config) observe(ctx context.Context, p *plan, e observe.Event) {
	if isNop(c.Observer) {
		return
	}
	e.Source, e.System = "txlock", "postgresql" // OpenTelemetry's db.system.name
	e.Shared = p.shared
	for _, k := range p.keys {
		e.Key, e.Name = observedKey(k), k.Name()
		c.Observer.Observe(ctx, e)
	}
}

// observedKey is the int64 an observe.Event carries for k: the bigint key,
// or the pair packed high/low as pg_locks' classid/objid show it.
func observedKey(k advisory.Key) int64 {
	classid, objid, _ := k.Locktag()
	return int64(uint64(classid)<<32 | uint64(objid))
}
