package redislock_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/locktest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// TestSemaphoreConformanceRedis runs the semaphore suite on semaphores on
// one Redis server; the witness is a PostgreSQL database of its own. The
// backend's fault expires the slot in the hash, its holder unaware.
func TestSemaphoreConformanceRedis(t *testing.T) {
	locktest.RunSemaphore(t, locktest.SemaphoreBackend{
		Name:     "redislock",
		MinTTL:   redislock.MinTTL,
		NotHeld:  redislock.ErrNotHeld,
		BadNames: []string{"a\x00b", "\x00semaphore{x}"},
		Start:    func(t *testing.T) string { return redistest.New(t, redistest.Options{}).Addr },
		Witness:  func(t *testing.T, _ string) string { return pgtest.New(t).DSN },
		Open: func(t testing.TB, addr string) locktest.SemaphoreHarness {
			c := conformanceClient(t, addr)
			sem := func(c redis.UniversalClient, n int, o locktest.Options) sqlock.SemaphoreAcquirer {
				return redislock.New(c, redislock.WithTimeout(o.Timeout), redislock.WithObserver(o.Observer)).Semaphore(n, o.TTL)
			}
			return locktest.SemaphoreHarness{
				New: func(n int, o locktest.Options) sqlock.SemaphoreAcquirer { return sem(c, n, o) },
				Unreachable: func(n int, o locktest.Options) sqlock.SemaphoreAcquirer {
					return sem(conformanceClient(t, locktest.ClosedAddr(t)), n, o)
				},
				Lose: func(ctx context.Context, key string, sl sqlock.Slot) error {
					i := strconv.Itoa(sl.Index())
					n, err := expireSlot.Run(ctx, c, []string{redislock.SemaphoreKey(key)}, i, sl.Token()).Int()
					if err == nil && n != 1 {
						err = fmt.Errorf("slot %s of %q is not held with token %d", i, key, sl.Token())
					}
					return err
				},
			}
		},
	})
}

// expireSlot expires slot ARGV[1] if its token is ARGV[2].
var expireSlot = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't' .. ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], 'e' .. ARGV[1], 0)
  return 1
end
return 0`)
