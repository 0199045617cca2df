package redislock_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/exclusiontest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// TestAcquireAllTakesEveryKeyOrNone: with one key held by someone else,
// TryAcquireAll takes none of the others (no key set, no token minted);
// once it is free, it takes all, sorted, each with a token above every
// earlier holder's, all refused to others; Release frees all, once.
func TestAcquireAllTakesEveryKeyOrNone(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	c := redistest.New(t, redistest.Options{}).Client(t, nil)
	locks := redislock.New(c)
	b, err := locks.TryAcquire(ctx, "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"c", "b", "a"}
	if _, err := locks.TryAcquireAll(ctx, keys, time.Minute); !errors.Is(err, redislock.ErrNotAcquired) || !errors.Is(err, sqlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll with b held: %v, want ErrNotAcquired", err)
	}
	for _, k := range []string{"a", "c", redislock.FenceKey("a"), redislock.FenceKey("c")} {
		if c.Exists(ctx, k).Val() != 0 {
			t.Fatalf("a refused TryAcquireAll wrote %q", k)
		}
	}
	bToken := b.Token()
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}

	all, err := locks.TryAcquireAll(ctx, keys, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(all.Keys(), ","); got != "a,b,c" {
		t.Fatalf("Keys = %s, want a,b,c", got)
	}
	if tok, ok := all.Token("b"); !ok || tok <= bToken {
		t.Fatalf("b's token %d (%v), want above the earlier holder's %d", tok, ok, bToken)
	}
	if _, ok := all.Token("d"); ok {
		t.Fatal("a token for a key the lock does not hold")
	}
	var _ sqlock.Lock = all
	for _, k := range keys {
		tok, _ := all.Token(k)
		if h, held, err := locks.Holder(ctx, k); err != nil || !held || h.Token != tok {
			t.Fatalf("%s: Holder %+v %v %v, want token %d", k, h, held, err, tok)
		}
		if _, err := locks.TryAcquire(ctx, k, time.Minute); !errors.Is(err, redislock.ErrNotAcquired) {
			t.Fatalf("%s taken while AcquireAll holds it: %v", k, err)
		}
	}
	if err := all.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, keys...).Val(); n != 0 {
		t.Fatalf("Release left %d keys", n)
	}
	if err := all.Release(ctx); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
}

// TestAcquireAllWaitsWithoutHoldingAPart: AcquireAll waits for a held key
// without holding any of the others meanwhile, and gets them all once it
// is released.
func TestAcquireAllWaitsWithoutHoldingAPart(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	s := redistest.New(t, redistest.Options{})
	c := s.Client(t, nil)
	b, err := redislock.New(c).TryAcquire(ctx, "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The waiter's own client counts its attempts.
	wc := s.Client(t, nil)
	attempts := &counter{}
	wc.AddHook(attempts)
	got := make(chan error, 1)
	var all *redislock.MultiLock
	go func() {
		var err error
		all, err = redislock.New(wc, redislock.WithTimeout(time.Minute)).AcquireAll(ctx, []string{"a", "b", "c"}, time.Minute)
		got <- err
	}()
	// While it waits — through several refused attempts — a and c stay
	// free.
	for attempts.n.Load() < 5 {
		if n := c.Exists(ctx, "a", "c").Val(); n != 0 {
			t.Fatalf("a waiting AcquireAll holds %d of the free keys", n)
		}
		select {
		case err := <-got:
			t.Fatalf("AcquireAll returned while b was held: %v", err)
		case <-ctx.Done():
			t.Fatal("the waiter never made 5 attempts")
		case <-time.After(time.Millisecond):
		}
	}
	if n := c.Exists(ctx, "a", "c").Val(); n != 0 {
		t.Fatalf("a waiting AcquireAll holds %d of the free keys", n)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("AcquireAll never got the keys once b was released")
	}
	defer all.Release(ctx)
	if n := c.Exists(ctx, "a", "b", "c").Val(); n != 3 {
		t.Fatalf("AcquireAll holds %d of 3 keys", n)
	}
}

// TestAcquireAllOverlappingSetsNeverOverlapOrDeadlock: 16 goroutines, each
// taking 3 of 6 keys given in a random order, 25 times: no key ever has
// two holders, each key's tokens strictly increase, and every goroutine
// finishes (canonical order: no deadlock).
func TestAcquireAllOverlappingSetsNeverOverlapOrDeadlock(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	c := redistest.New(t, redistest.Options{}).Client(t, func(o *redis.Options) { o.PoolSize = 32 })
	const workers, rounds, nkeys = 16, 25, 6
	var inside [nkeys]atomic.Int32
	var mu sync.Mutex
	last := map[string]int64{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			locks := redislock.New(c, redislock.WithTimeout(time.Minute))
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range rounds {
				idx := rng.Perm(nkeys)[:3]
				keys := make([]string, len(idx))
				for i, k := range idx {
					keys[i] = fmt.Sprintf("k%d", k)
				}
				l, err := locks.AcquireAll(ctx, keys, 10*time.Second)
				if err != nil {
					errs <- err
					return
				}
				for _, k := range idx {
					if inside[k].Add(1) != 1 {
						errs <- fmt.Errorf("k%d has two holders", k)
					}
				}
				mu.Lock()
				for _, k := range keys {
					tok, _ := l.Token(k)
					if tok <= last[k] {
						errs <- fmt.Errorf("%s: token %d after %d", k, tok, last[k])
					}
					last[k] = tok
				}
				mu.Unlock()
				for _, k := range idx {
					inside[k].Add(-1)
				}
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestAcquireAllLostWhenAnyKeyIs: a key deleted under a MultiLock makes its
// next renewal refused: the whole lock is lost (ErrLost), and Release frees
// the keys still its own.
func TestAcquireAllLostWhenAnyKeyIs(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	c := redistest.New(t, redistest.Options{}).Client(t, nil)
	// Renewed every second: a is still there, the holder's, when the
	// renewal finds b gone.
	l, err := redislock.New(c).TryAcquireAll(ctx, []string{"a", "b"}, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, "b")
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("a MultiLock with a key deleted was never lost")
	}
	if !errors.Is(l.Err(), redislock.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, "a").Val(); n != 0 {
		t.Fatal("Release left the key still held")
	}
}

// TestAcquireAllRefusesBadKeyLists: no keys, a repeated key, a key with a
// NUL byte, an empty key, more than MaxKeys, or a TTL under MinTTL is
// ErrInvalid (sqlock.ErrInvalidArgument), with nothing written.
func TestAcquireAllRefusesBadKeyLists(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	c := redistest.New(t, redistest.Options{}).Client(t, nil)
	locks := redislock.New(c)
	many := make([]string, redislock.MaxKeys+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct {
		keys []string
		ttl  time.Duration
	}{
		{nil, time.Second}, {[]string{"a", "b", "a"}, time.Second}, {[]string{"a", "b\x00"}, time.Second},
		{[]string{"a", ""}, time.Second}, {many, time.Second}, {[]string{"a"}, time.Millisecond},
	} {
		_, err := locks.TryAcquireAll(ctx, tc.keys, tc.ttl)
		if !errors.Is(err, redislock.ErrInvalid) || !errors.Is(err, sqlock.ErrInvalidArgument) {
			t.Errorf("TryAcquireAll(%d keys, %v): %v, want ErrInvalid", len(tc.keys), tc.ttl, err)
		}
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("bad key lists wrote %d keys", n)
	}
	var nilLocker *redislock.Locker
	if _, err := nilLocker.AcquireAll(ctx, []string{"a"}, time.Second); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("nil Locker: %v, want ErrNilHandle", err)
	}
}

// TestAcquireAllExclusionAcrossProcesses: 4 OS processes × 8 goroutines ×
// 32 sections on 4 names, each section under AcquireAll of its name and
// the next (so neighbours contend from both sides, as sets given in
// different orders): PostgreSQL sees no two sections of a name overlap,
// each fenced by its name's token, and every process finishes (no
// deadlock).
func TestAcquireAllExclusionAcrossProcesses(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{})
	db := pgtest.New(t)
	cfg := exclusiontest.Config{Procs: 4, Goroutines: 8, Keys: 4, N: 32, Worker: func(int) *exec.Cmd {
		return child("exclusion-all", "REDIS_ADDRS="+s.Addr, "REDIS_DSN="+db.DSN, "REDIS_TTL=500ms", "REDIS_KEYS=4")
	}}
	sum := exclusiontest.Run(t, db, cfg)
	t.Logf("%d acquisitions of 2 names each, 0 overlaps, %d lost under load (reported), in %v",
		sum.Sections, sum.Lost, sum.Took.Round(time.Millisecond))
}

// TestAcquireAllAndLabelsThroughACluster: through a real cluster's
// ClusterClient, keys that share a hash tag are taken together, labelled,
// and read back (the counters and the holder's hash are in the keys'
// slot), tokens staying above an earlier version's counter; keys in
// different slots fail with CROSSSLOT and are left unwritten.
func TestAcquireAllAndLabelsThroughACluster(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	c := redistest.New(t, redistest.Options{Cluster: true}).ClusterClient(t)
	if err := c.Set(ctx, "{orders}:1"+redislock.FenceSuffix, 7, 0).Err(); err != nil {
		t.Fatal(err)
	}
	lk := redislock.New(c, redislock.WithHolder("host-a"))
	l, err := lk.TryAcquireAll(ctx, []string{"{orders}:2", "{orders}:1"}, time.Minute)
	if err != nil {
		t.Fatalf("tagged keys through a cluster client: %v", err)
	}
	if tok, _ := l.Token("{orders}:1"); tok <= 7 {
		t.Fatalf("token %d, want above the earlier version's counter 7", tok)
	}
	for _, k := range l.Keys() {
		if h, held, err := lk.Holder(ctx, k); err != nil || !held || h.Label != "host-a" {
			t.Fatalf("%s: Holder %+v %v %v", k, h, held, err)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = lk.TryAcquireAll(ctx, []string{"job-a", "job-b"}, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("keys in different slots: %v, want CROSSSLOT", err)
	}
	if n := c.Exists(ctx, "job-a").Val() + c.Exists(ctx, "job-b").Val(); n != 0 {
		t.Fatalf("a CROSSSLOT attempt left %d keys", n)
	}
}
