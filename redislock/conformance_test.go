package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/locktest"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// TestConformanceRedis runs the lock backends' conformance suite on locks
// on one Redis server.
func TestConformanceRedis(t *testing.T) {
	locktest.Run(t, locktest.Backend{
		Name:    "redislock",
		Caps:    locktest.Caps{Fenced: true, TTL: true},
		MinTTL:  redislock.MinTTL,
		NotHeld: redislock.ErrNotHeld,
		// A NUL byte marks the fencing counters' key space.
		BadNames: []string{"a\x00b", "\x00fence{x}"},
		Start:    func(t *testing.T) string { return redistest.New(t, redistest.Options{}).Addr },
		Open: func(t testing.TB, addr string) locktest.Harness {
			c := conformanceClient(t, addr)
			locker := func(c redis.UniversalClient, o locktest.Options) sqlock.Acquirer {
				return redislock.New(c, redislock.WithTimeout(o.Timeout), redislock.WithObserver(o.Observer)).Acquirer(o.TTL)
			}
			return locktest.Harness{
				New: func(o locktest.Options) sqlock.Acquirer { return locker(c, o) },
				Unreachable: func(o locktest.Options) sqlock.Acquirer {
					return locker(conformanceClient(t, locktest.ClosedAddr(t)), o)
				},
				Lose: func(ctx context.Context, key string, lk sqlock.Lock) error {
					// The key expires, its holder unaware: its next renewal
					// is refused. Only while lk's token is the key's last.
					n, err := expireIfToken.Run(ctx, c, []string{key, redislock.FenceKey(key)}, lk.(sqlock.Fenced).Token()).Int()
					if err == nil && n != 1 {
						err = fmt.Errorf("the key %q is not held with token %d", key, lk.(sqlock.Fenced).Token())
					}
					return err
				},
			}
		},
	})
}

// expireIfToken deletes the lock's key if its counter's last token is the
// holder's.
var expireIfToken = redis.NewScript(`
if redis.call('GET', KEYS[2]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// TestConformanceRedlock runs it on Redlock over three servers: with
// TTLs, but no fencing token (the servers share no counter), so no lock is
// a sqlock.Fenced.
func TestConformanceRedlock(t *testing.T) {
	locktest.Run(t, locktest.Backend{
		Name:     "redlock",
		Caps:     locktest.Caps{Fenced: false, TTL: true},
		MinTTL:   redislock.MinTTL,
		NotHeld:  redislock.ErrNotHeld,
		BadNames: []string{"a\x00b"},
		Start: func(t *testing.T) string {
			var addrs []string
			for _, s := range redistest.NewN(t, 3, redistest.Options{}) {
				addrs = append(addrs, s.Addr)
			}
			return strings.Join(addrs, ",")
		},
		Open: func(t testing.TB, addrs string) locktest.Harness {
			open := func(addrs []string) []redis.UniversalClient {
				cs := make([]redis.UniversalClient, len(addrs))
				for i, a := range addrs {
					cs[i] = conformanceClient(t, a)
				}
				return cs
			}
			cs := open(strings.Split(addrs, ","))
			redlock := func(cs []redis.UniversalClient, o locktest.Options) sqlock.Acquirer {
				return redislock.NewRedlock(cs, redislock.WithTimeout(o.Timeout), redislock.WithObserver(o.Observer)).Acquirer(o.TTL)
			}
			return locktest.Harness{
				New: func(o locktest.Options) sqlock.Acquirer { return redlock(cs, o) },
				Unreachable: func(o locktest.Options) sqlock.Acquirer {
					return redlock(open([]string{locktest.ClosedAddr(t), locktest.ClosedAddr(t), locktest.ClosedAddr(t)}), o)
				},
				Lose: func(ctx context.Context, key string, lk sqlock.Lock) error {
					// Another holder takes the key on every server, as one
					// would after its TTL ran out, and holds it past the
					// holder's next extension: a deleted key would be
					// retaken by that extension (Redlock's deliberate
					// repair of a server that lost it), a taken one
					// refuses it.
					hold := thiefHold
					if d, ok := lk.(interface{ Deadline() time.Time }); ok && time.Until(d.Deadline()) > roomyDeadline {
						// A lock of the suite's roomy TTL (the history's)
						// extends itself a third of a minute from now;
						// its holder releases within milliseconds. A
						// 4 s hold would stall every other client
						// after each of the history's ~16 faults.
						hold = shortThiefHold
					}
					var errs []error
					for _, c := range cs {
						if err := c.Set(ctx, key, "locktest-thief", hold).Err(); err != nil {
							errs = append(errs, fmt.Errorf("SET %q on %v: %w", key, c, err))
						}
					}
					return errors.Join(errs...)
				},
			}
		},
	})
}

// thiefHold is how long Redlock's fault holds the key it took: longer
// than the suite's shortest TTL (3 s), so the holder of that TTL is refused
// by its next extension or its own deadline passes first.
const thiefHold = 4 * time.Second

// shortThiefHold is the thief's hold of a lock whose deadline is more
// than roomyDeadline away: its holder's first extension is due a third
// of its TTL (over 10 s) from the grant, long after the fault's holder
// has written and released.
const (
	shortThiefHold = 200 * time.Millisecond
	roomyDeadline  = 30 * time.Second
)

// conformanceClient is a client configured as NewRedlock's doc says: a
// server that is down costs a command no more than its context allows.
func conformanceClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}
