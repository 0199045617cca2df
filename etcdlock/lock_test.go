package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/etcdlock"
)

// keys counts the keys under a lock name's prefix: its holder's and its
// waiters'.
func keys(t *testing.T, cl *clientv3.Client, name string) int64 {
	t.Helper()
	resp, err := cl.Get(context.Background(), etcdlock.DefaultPrefix+name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// waitKeys waits until name has n keys (waiters have joined the line),
// bounded by the test's deadline.
func waitKeys(t *testing.T, cl *clientv3.Client, name string, n int64) {
	t.Helper()
	ctx := testContext(t)
	for keys(t, cl, name) != n {
		select {
		case <-ctx.Done():
			t.Fatalf("%q never had %d keys (it has %d)", name, n, keys(t, cl, name))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// testContext ends a little before the test's deadline (or with the
// test), so that a wait bounded by it can still say what never happened.
func testContext(t testing.TB) context.Context {
	t.Helper()
	dt, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return t.Context()
	}
	d, ok := dt.Deadline()
	if !ok {
		return t.Context()
	}
	ctx, cancel := context.WithDeadline(t.Context(), d.Add(-5*time.Second))
	t.Cleanup(cancel)
	return ctx
}

// await receives from ch, or fails the test, saying what never happened,
// once its deadline is near.
func await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-testContext(t).Done():
		t.Fatalf("%s never happened", what)
		panic("unreachable")
	}
}

// awaitGroup waits for wg, or fails the test once its deadline is near.
func awaitGroup(t testing.TB, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	await(t, done, what)
}

func mustAcquire(t *testing.T, lk *etcdlock.Locker, name string, ttl time.Duration) *etcdlock.Lock {
	t.Helper()
	l, err := lk.Acquire(context.Background(), name, ttl)
	if err != nil {
		t.Fatalf("Acquire %q: %v", name, err)
	}
	return l
}

// TestTryAcquireOnAHeldNameIsNotAcquired: a held name refuses TryAcquire
// with ErrNotAcquired (and sqlock's), leaving only the holder's key; once
// released, the next holder's token is greater.
func TestTryAcquireOnAHeldNameIsNotAcquired(t *testing.T) {
	cl := sharedClient(t)
	a, b := etcdlock.New(cl), etcdlock.New(sharedClient(t))
	name := t.Name()
	l := mustAcquire(t, a, name, 10*time.Second)
	_, err := b.TryAcquire(context.Background(), name, 10*time.Second)
	if !errors.Is(err, etcdlock.ErrNotAcquired) || !errors.Is(err, sqlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held name: %v, want ErrNotAcquired", err)
	}
	if n := keys(t, cl, name); n != 1 {
		t.Fatalf("%d keys after a refused TryAcquire, want the holder's alone", n)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryAcquire(context.Background(), name, 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire of a released name: %v", err)
	}
	defer l2.Release(context.Background())
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d: not increasing", l2.Token(), l.Token())
	}
}

// TestWaitersAreServedInArrivalOrder: waiters that joined the line one
// after another get the lock in that order, each once its predecessor
// released, with increasing tokens.
func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	cl := sharedClient(t)
	lk := etcdlock.New(cl, etcdlock.WithTimeout(time.Minute))
	name := t.Name()
	first := mustAcquire(t, lk, name, 10*time.Second)
	const waiters = 6
	var mu sync.Mutex
	var order []int
	var tokens []int64
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			l, err := lk.Acquire(context.Background(), name, 10*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			tokens = append(tokens, l.Token())
			mu.Unlock()
			if err := l.Release(context.Background()); err != nil {
				t.Error(err)
			}
		})
		waitKeys(t, cl, name, int64(i+2)) // i+1 waiters and the holder
	}
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitGroup(t, &wg, "every waiter served")
	for i := range order {
		if order[i] != i || (i > 0 && tokens[i] <= tokens[i-1]) || tokens[i] <= first.Token() {
			t.Fatalf("served %v with tokens %v after %d, want arrival order and increasing tokens", order, tokens, first.Token())
		}
	}
	if len(order) != waiters {
		t.Fatalf("%d of %d waiters served", len(order), waiters)
	}
}

// TestWaiterThatGivesUpLeavesTheLine: a waiter whose context is cancelled,
// or whose WithTimeout runs out, has removed its key before Acquire
// returns; the timeout matches ErrTimeout and not DeadlineExceeded, the
// caller's deadline both.
func TestWaiterThatGivesUpLeavesTheLine(t *testing.T) {
	cl := sharedClient(t)
	name := t.Name()
	holder := mustAcquire(t, etcdlock.New(cl), name, 10*time.Second)
	defer holder.Release(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := etcdlock.New(cl, etcdlock.WithTimeout(time.Minute)).Acquire(ctx, name, 10*time.Second)
		done <- err
	}()
	waitKeys(t, cl, name, 2)
	cancel()
	if err := await(t, done, "the cancelled waiter returning"); !errors.Is(err, context.Canceled) || errors.Is(err, sqlock.ErrTimeout) {
		t.Fatalf("cancelled wait: %v, want context.Canceled", err)
	}
	if n := keys(t, cl, name); n != 1 {
		t.Fatalf("%d keys after the waiter gave up, want the holder's alone", n)
	}

	_, err := etcdlock.New(cl, etcdlock.WithTimeout(100*time.Millisecond)).Acquire(context.Background(), name, 10*time.Second)
	if !errors.Is(err, sqlock.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past WithTimeout: %v, want ErrTimeout without DeadlineExceeded", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	_, err = etcdlock.New(cl, etcdlock.WithTimeout(time.Minute)).Acquire(dctx, name, 10*time.Second)
	if !errors.Is(err, etcdlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the caller's deadline: %v, want ErrTimeout and DeadlineExceeded", err)
	}
	if n := keys(t, cl, name); n != 1 {
		t.Fatalf("%d keys after the waits ran out, want the holder's alone", n)
	}
}

// TestBadInputIsRefusedWithNothingSent: bad names, TTLs, options and
// handles are refused with the shared sentinels, by a Locker whose client
// cannot reach any server (so nothing was sent).
func TestBadInputIsRefusedWithNothingSent(t *testing.T) {
	dead, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	lk := etcdlock.New(dead)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		ttl  time.Duration
	}{
		{"", 10 * time.Second},
		{strings.Repeat("x", etcdlock.MaxNameLen+1), 10 * time.Second},
		{"ok", 0},
		{"ok", -time.Second},
		{"ok", etcdlock.MinTTL - time.Nanosecond},
		{"ok", etcdlock.MaxTTL + time.Second},
	} {
		for _, try := range []bool{false, true} {
			var err error
			if try {
				_, err = lk.TryAcquire(ctx, c.name, c.ttl)
			} else {
				_, err = lk.Acquire(ctx, c.name, c.ttl)
			}
			if !errors.Is(err, sqlock.ErrInvalidArgument) || !errors.Is(err, etcdlock.ErrInvalid) {
				t.Errorf("name of %d bytes, TTL %v: %v, want ErrInvalidArgument", len(c.name), c.ttl, err)
			}
		}
	}
	if _, err := etcdlock.New(nil).Acquire(ctx, "ok", 10*time.Second); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil client: %v, want ErrNilHandle", err)
	}
	for _, o := range []etcdlock.Option{etcdlock.WithTimeout(0), etcdlock.WithTimeout(-time.Second), etcdlock.WithPrefix("")} {
		if _, err := etcdlock.New(dead, o).TryAcquire(ctx, "ok", 10*time.Second); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Errorf("bad option: %v, want ErrInvalidOption", err)
		}
	}
	var nilLocker *etcdlock.Locker
	if _, err := nilLocker.TryAcquire(ctx, "ok", 10*time.Second); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil Locker: %v, want ErrNilHandle", err)
	}
}

// TestReleaseIsIdempotent: a second Release sends nothing and reports
// ErrNotHeld; a lock's Context carries its token.
func TestReleaseIsIdempotent(t *testing.T) {
	l := mustAcquire(t, etcdlock.New(sharedClient(t)), t.Name(), 10*time.Second)
	ctx, cancel := l.Context(context.Background())
	if tok, ok := sqlock.FencingToken(ctx); !ok || tok != l.Token() {
		t.Fatalf("Context carries token %d, %t; want %d", tok, ok, l.Token())
	}
	cancel()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if l.Err() != nil {
		t.Fatalf("Err after Release: %v, want nil (a Release is no loss)", l.Err())
	}
}

// TestNamesWithSlashesDoNotCollide: "a" and "a/b" are different locks,
// though one's key prefix would otherwise begin the other's.
func TestNamesWithSlashesDoNotCollide(t *testing.T) {
	lk := etcdlock.New(sharedClient(t))
	a := mustAcquire(t, lk, t.Name(), 10*time.Second)
	defer a.Release(context.Background())
	b, err := lk.TryAcquire(context.Background(), t.Name()+"/b", 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire of %q while %q is held: %v", t.Name()+"/b", t.Name(), err)
	}
	b.Release(context.Background())
	c, err := lk.TryAcquire(context.Background(), t.Name()+"%2Fb", 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire of an escaped-looking name: %v", err)
	}
	c.Release(context.Background())
}

// TestRevokedLeaseIsLost: when the cluster no longer has the lock's lease
// (revoked behind the holder's back), the next keepalive is refused: Lost
// closes, Err and Context's cause match ErrLost, and Release is not held.
func TestRevokedLeaseIsLost(t *testing.T) {
	cl := sharedClient(t)
	l := mustAcquire(t, etcdlock.New(cl), t.Name(), 3*time.Second)
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	resp, err := cl.Get(context.Background(), l.Key())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the lock's key: %v, %v", resp, err)
	}
	if _, err := cl.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	await(t, l.Lost(), "Lost firing after the lease was revoked")
	await(t, ctx.Done(), "the lock's Context ending")
	if !errors.Is(l.Err(), sqlock.ErrLost) || !errors.Is(context.Cause(ctx), etcdlock.ErrLost) {
		t.Fatalf("Err %v, cause %v; want ErrLost", l.Err(), context.Cause(ctx))
	}
	if err := l.Release(context.Background()); !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("Release of a lost lock: %v, want ErrNotHeld", err)
	}
}

// TestExclusionAmongGoroutines: 32 goroutines on 3 Lockers take one name
// 10 times each; never two inside at once, and the tokens of successive
// holders increase.
func TestExclusionAmongGoroutines(t *testing.T) {
	lks := []*etcdlock.Locker{}
	for range 3 {
		lks = append(lks, etcdlock.New(sharedClient(t), etcdlock.WithTimeout(5*time.Minute)))
	}
	name := t.Name()
	var inside, entries atomic.Int64
	var last atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for range 10 {
				l, err := lks[g%3].Acquire(context.Background(), name, 10*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two holders inside at once")
				}
				if prev := last.Swap(l.Token()); prev >= l.Token() {
					t.Errorf("token %d after %d", l.Token(), prev)
				}
				entries.Add(1)
				inside.Add(-1)
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	awaitGroup(t, &wg, "every goroutine's 10 entries")
	if entries.Load() != 320 {
		t.Fatalf("%d entries, want 320", entries.Load())
	}
}

// TestWaiterWithTheShortestTTLIsServed: a waiter with a TTL of MinTTL
// queues behind a holder and, once it releases, holds the lock on the key
// it queued with, with a greater token. (That its keepalives keep a wait
// of any length alive is TestWaiterOutlivesItsTTL, on a fake clock.)
func TestWaiterWithTheShortestTTLIsServed(t *testing.T) {
	cl := sharedClient(t)
	name := t.Name()
	holder := mustAcquire(t, etcdlock.New(cl), name, time.Minute)
	got := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.New(cl, etcdlock.WithTimeout(time.Minute)).Acquire(testContext(t), name, etcdlock.MinTTL)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitKeys(t, cl, name, 2)
	resp, err := cl.Get(testContext(t), etcdlock.DefaultPrefix+name+"/", clientv3.WithLastCreate()...)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the waiter's key: %v, %v", resp, err)
	}
	queued := string(resp.Kvs[0].Key)
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := await(t, got, "the waiter's Acquire returning")
	if l == nil {
		t.Fatal("the waiter did not get the lock")
	}
	if l.Key() != queued || l.Token() <= holder.Token() {
		t.Fatalf("waiter holds key %q with token %d; want the key it queued with, %q, and a token above the holder's %d", l.Key(), l.Token(), queued, holder.Token())
	}
	released(t, l)
}
