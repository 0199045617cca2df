package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// TestBadInputIsRefusedBeforeAnythingIsSent: empty keys and TTLs that are
// not positive or shorter than MinTTL are ErrInvalid, on a Locker and a
// Redlock, and no command reaches a client.
func TestBadInputIsRefusedBeforeAnythingIsSent(t *testing.T) {
	leakCheck(t)
	var sent counter
	mk := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		c.AddHook(&sent)
		t.Cleanup(func() { c.Close() })
		return c
	}
	lk := redislock.New(mk())
	rl := redislock.NewRedlock([]redis.UniversalClient{mk(), mk(), mk()})
	ctx := context.Background()
	cases := []struct {
		key string
		ttl time.Duration
	}{
		{"", time.Second},
		{"k", 0},
		{"k", -time.Second},
		{"k", time.Millisecond},
		{"k", redislock.MinTTL - time.Microsecond}, // 9 ms once counted in whole ms
	}
	for _, c := range cases {
		for _, try := range []func(context.Context, string, time.Duration) error{
			func(ctx context.Context, k string, d time.Duration) error {
				_, err := lk.Acquire(ctx, k, d)
				return err
			},
			func(ctx context.Context, k string, d time.Duration) error {
				_, err := lk.TryAcquire(ctx, k, d)
				return err
			},
			func(ctx context.Context, k string, d time.Duration) error {
				_, err := rl.Acquire(ctx, k, d)
				return err
			},
			func(ctx context.Context, k string, d time.Duration) error {
				_, err := rl.TryAcquire(ctx, k, d)
				return err
			},
		} {
			if err := try(ctx, c.key, c.ttl); !errors.Is(err, redislock.ErrInvalid) || !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Errorf("key %q ttl %v: %v, want ErrInvalid and sqlock.ErrInvalidArgument", c.key, c.ttl, err)
			}
		}
	}
	if n := sent.n.Load(); n != 0 {
		t.Fatalf("%d commands sent", n)
	}
}

// TestBadInputMatchesInvalidArgumentOnARealServer: on live servers, through
// a Locker, a Redlock and their sqlock.Acquirer, every bad key and TTL is
// redislock.ErrInvalid and sqlock.ErrInvalidArgument, no lock is returned,
// no command is sent and no key exists afterwards.
func TestBadInputMatchesInvalidArgumentOnARealServer(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	servers := redistest.NewN(t, 3, redistest.Options{})
	var sent counter
	cs := clients(t, servers)
	for _, c := range cs {
		c.(*redis.Client).AddHook(&sent)
	}
	lk := redislock.New(cs[0])
	rl := redislock.NewRedlock(cs)
	type acquirer = func(ttl time.Duration) sqlock.Acquirer
	for name, acq := range map[string]acquirer{"Locker": lk.Acquirer, "Redlock": rl.Acquirer} {
		for _, c := range []struct {
			key string
			ttl time.Duration
		}{
			{"", time.Minute}, {"nul\x00", time.Minute}, {"k", 0}, {"k", -time.Second}, {"k", redislock.MinTTL - time.Microsecond},
		} {
			a := acq(c.ttl)
			for how, f := range map[string]func(context.Context, string) (sqlock.Lock, error){"Acquire": a.Acquire, "TryAcquire": a.TryAcquire} {
				if l, err := f(ctx, c.key); l != nil || !errors.Is(err, redislock.ErrInvalid) || !errors.Is(err, sqlock.ErrInvalidArgument) {
					t.Errorf("%s: Acquirer(%v).%s(%q): %v, %v; want nil, ErrInvalid and sqlock.ErrInvalidArgument", name, c.ttl, how, c.key, l, err)
				}
			}
		}
	}
	if _, err := lk.TryAcquire(ctx, "", time.Minute); !errors.Is(err, sqlock.ErrInvalidArgument) {
		t.Errorf("Locker.TryAcquire(\"\"): %v, want sqlock.ErrInvalidArgument", err)
	}
	if _, err := rl.TryAcquire(ctx, "", time.Minute); !errors.Is(err, sqlock.ErrInvalidArgument) {
		t.Errorf("Redlock.TryAcquire(\"\"): %v, want sqlock.ErrInvalidArgument", err)
	}
	if n := sent.n.Load(); n != 0 {
		t.Fatalf("%d commands sent for bad input", n)
	}
	for i, c := range cs {
		if n := must[int64](t)(c.DBSize(ctx).Result()); n != 0 {
			t.Errorf("server %d holds %d keys after bad input", i, n)
		}
	}
}

// TestNilHandlesAndBadOptionsAreTypedErrors: nil clients (untyped and
// typed), a Redlock of an even number or fewer than 3 servers, a
// non-positive timeout, a nil context, and Release of a nil lock are typed
// errors, and nothing is sent.
func TestNilHandlesAndBadOptionsAreTypedErrors(t *testing.T) {
	leakCheck(t)
	var sent counter
	mk := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		c.AddHook(&sent)
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx := context.Background()
	var typedNil *redis.Client
	one := mk()
	check := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	_, err := redislock.New(nil).TryAcquire(ctx, "k", time.Second)
	check("nil client", err, sqlock.ErrNilHandle)
	_, err = redislock.New(typedNil).Acquire(ctx, "k", time.Second)
	check("typed nil client", err, sqlock.ErrNilHandle)
	for _, d := range []time.Duration{0, -time.Second} {
		_, err = redislock.New(one, redislock.WithTimeout(d)).Acquire(ctx, "k", time.Second)
		check("WithTimeout", err, sqlock.ErrInvalidOption)
		_, err = redislock.NewRedlock([]redis.UniversalClient{one, mk(), mk()}, redislock.WithTimeout(d)).Acquire(ctx, "k", time.Second)
		check("Redlock WithTimeout", err, sqlock.ErrInvalidOption)
	}
	for _, n := range []int{0, 1, 2, 4, 6} {
		cs := make([]redis.UniversalClient, n)
		for i := range cs {
			cs[i] = mk()
		}
		_, err = redislock.NewRedlock(cs).TryAcquire(ctx, "k", time.Second)
		check("Redlock of "+string(rune('0'+n)), err, sqlock.ErrInvalidOption)
	}
	_, err = redislock.NewRedlock([]redis.UniversalClient{mk(), nil, mk()}).Acquire(ctx, "k", time.Second)
	check("Redlock with a nil client", err, sqlock.ErrNilHandle)
	_, err = redislock.NewRedlock([]redis.UniversalClient{mk(), typedNil, mk()}).Acquire(ctx, "k", time.Second)
	check("Redlock with a typed nil client", err, sqlock.ErrNilHandle)
	//lint:ignore SA1012 a nil context is the bad input under test
	_, err = redislock.New(one).Acquire(nil, "k", time.Second)
	check("nil context", err, sqlock.ErrNilHandle)
	var nl *redislock.Lock
	check("Release of a nil Lock", nl.Release(ctx), redislock.ErrNotHeld)
	var nrl *redislock.RedlockLock
	check("Release of a nil RedlockLock", nrl.Release(ctx), redislock.ErrNotHeld)
	var nlk *redislock.Locker
	_, err = nlk.Acquire(ctx, "k", time.Second)
	check("nil Locker", err, sqlock.ErrNilHandle)
	if n := sent.n.Load(); n != 0 {
		t.Fatalf("%d commands sent", n)
	}
}
