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

// TestLockNamesNeverCollideWithFencingCounters: the two collisions of
// issue 31, on one server and on Redlock. Once "job" has been used, "job:fence"
// can be taken; while "job:fence" is held, "job" can be taken (and its
// token still grows); a key with a NUL byte — the counters' key space — is
// refused with ErrInvalid before anything is sent.
func TestLockNamesNeverCollideWithFencingCounters(t *testing.T) {
	leakCheck(t)
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "single", 3: "redlock-3"}[n], func(t *testing.T) {
			cs := clients(t, redistest.NewN(t, n, redistest.Options{}))
			var sent counter
			cs[0].AddHook(&sent)
			a := acquirers(cs, time.Minute)
			ctx := context.Background()
			first := must[sqlock.Lock](t)(a.Acquire(ctx, "job"))
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			fence, err := a.TryAcquire(ctx, "job:fence")
			if err != nil {
				t.Fatalf(`"job:fence" after "job" was used: %v`, err)
			}
			second, err := a.TryAcquire(ctx, "job")
			if err != nil {
				t.Fatalf(`"job" while "job:fence" is held: %v`, err)
			}
			if f, ok := first.(sqlock.Fenced); ok && second.(sqlock.Fenced).Token() <= f.Token() {
				t.Fatalf("tokens %d then %d", f.Token(), second.(sqlock.Fenced).Token())
			}
			for _, l := range []sqlock.Lock{fence, second} {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			before := sent.n.Load()
			if _, err := a.TryAcquire(ctx, "job\x00fence"); !errors.Is(err, redislock.ErrInvalid) || sent.n.Load() != before {
				t.Fatalf("a key with a NUL byte: %v, %d commands sent", err, sent.n.Load()-before)
			}
		})
	}
}

// TestTokensStayAboveAnEarlierVersionsCounter: a Redis that holds the
// counter an earlier version kept at key+FenceSuffix ("job:fence" = 41)
// goes on from it: the next token is 42, then 43, and the old counter is
// left as it was; while a process of the earlier version still takes the
// lock (its counter moved to 100) the next token is above it (101); and a
// lock once called "job:fence", whose key holds an owner rather than a
// count, is not read as one.
func TestTokensStayAboveAnEarlierVersionsCounter(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{})
	c := s.Client(t, nil)
	ctx := context.Background()
	if err := c.Set(ctx, "job"+redislock.FenceSuffix, 41, 0).Err(); err != nil {
		t.Fatal(err)
	}
	lk := redislock.New(c)
	next := func() int64 {
		t.Helper()
		l := must[*redislock.Lock](t)(lk.TryAcquire(ctx, "job", time.Minute))
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return l.Token()
	}
	if a, b := next(), next(); a != 42 || b != 43 {
		t.Fatalf("tokens %d, %d after an old counter at 41: want 42, 43", a, b)
	}
	if old := must[int64](t)(c.Get(ctx, "job"+redislock.FenceSuffix).Int64()); old != 41 {
		t.Fatalf("the old counter was changed to %d", old)
	}
	if err := c.Set(ctx, "job"+redislock.FenceSuffix, 100, 0).Err(); err != nil { // an old process's INCRs
		t.Fatal(err)
	}
	if tok := next(); tok != 101 {
		t.Fatalf("token %d after the old counter reached 100: want 101", tok)
	}
	if err := c.Del(ctx, "job"+redislock.FenceSuffix).Err(); err != nil {
		t.Fatal(err)
	}
	held := must[*redislock.Lock](t)(lk.TryAcquire(ctx, "job"+redislock.FenceSuffix, time.Minute))
	defer held.Release(ctx)
	if tok := next(); tok != 102 {
		t.Fatalf("token %d while a lock called job:fence is held: want 102", tok)
	}
}

// TestFencingCounterSharesTheLocksHashSlot: through a ClusterClient of a
// real Redis Cluster (one node owning every slot, which refuses a script
// whose keys are in different slots), keys with and without hash tags are
// locked, their tokens grow, and each counter (FenceKey) is in its lock's
// slot (CLUSTER KEYSLOT); a tagged key's old counter is read there too.
func TestFencingCounterSharesTheLocksHashSlot(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{Cluster: true})
	c := s.ClusterClient(t)
	ctx := context.Background()
	lk := redislock.New(c)
	if err := c.Set(ctx, "{orders}:lock"+redislock.FenceSuffix, 7, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"job", "{orders}:lock", "user:{42}:cart", "a{b"} {
		if slot, fslot := keySlot(t, c, key), keySlot(t, c, redislock.FenceKey(key)); slot != fslot {
			t.Errorf("%q is in slot %d, its counter %q in %d", key, slot, redislock.FenceKey(key), fslot)
		}
		var last int64
		for range 2 {
			l, err := lk.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				t.Fatalf("%q through a cluster client: %v", key, err)
			}
			if l.Token() <= last || key == "{orders}:lock" && l.Token() <= 7 {
				t.Errorf("%q: token %d after %d", key, l.Token(), last)
			}
			last = l.Token()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func keySlot(t *testing.T, c *redis.ClusterClient, key string) int64 {
	t.Helper()
	return must[int64](t)(c.ClusterKeySlot(context.Background(), key).Result())
}
