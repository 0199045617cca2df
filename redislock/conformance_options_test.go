package redislock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/locktest"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// TestConformanceRedisLabelled runs the conformance suite on a Locker
// whose locks carry a holder label and payload: taken, renewed and
// released by AcquireAll's scripts on one key, and still every promise of
// a fenced lock.
func TestConformanceRedisLabelled(t *testing.T) {
	conformanceWith(t, "redislock-labelled", func(t *testing.T) string {
		return redistest.New(t, redistest.Options{}).Addr
	}, redislock.WithHolder("conformance"), redislock.WithPayload([]byte("payload")))
}

// TestConformanceRedisReplicated runs it on a Locker that waits for a
// replica (WithReplicas): a primary with one replica, every grant and
// renewal acknowledged by it.
func TestConformanceRedisReplicated(t *testing.T) {
	conformanceWith(t, "redislock-replicated", func(t *testing.T) string {
		p := redistest.New(t, redistest.Options{})
		redistest.New(t, redistest.Options{ReplicaOf: p.Addr})
		if err := p.WaitReplicas(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		return p.Addr
	}, redislock.WithReplicas(1, time.Second))
}

// conformanceWith is TestConformanceRedis's backend with opts added to
// every Locker.
func conformanceWith(t *testing.T, name string, start func(*testing.T) string, opts ...redislock.Option) {
	locktest.Run(t, locktest.Backend{
		Name:     name,
		Caps:     locktest.Caps{Fenced: true, TTL: true},
		MinTTL:   redislock.MinTTL,
		NotHeld:  redislock.ErrNotHeld,
		BadNames: []string{"a\x00b", "\x00fence{x}"},
		Start:    start,
		Open: func(t testing.TB, addr string) locktest.Harness {
			c := conformanceClient(t, addr)
			locker := func(c redis.UniversalClient, o locktest.Options) sqlock.Acquirer {
				all := append([]redislock.Option{redislock.WithTimeout(o.Timeout), redislock.WithObserver(o.Observer)}, opts...)
				return redislock.New(c, all...).Acquirer(o.TTL)
			}
			return locktest.Harness{
				New: func(o locktest.Options) sqlock.Acquirer { return locker(c, o) },
				Unreachable: func(o locktest.Options) sqlock.Acquirer {
					return locker(conformanceClient(t, locktest.ClosedAddr(t)), o)
				},
				Lose: func(ctx context.Context, key string, lk sqlock.Lock) error {
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
