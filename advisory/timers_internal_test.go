package advisory

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The timer-driven logic of the package — the keepalive's schedule, loss
// and silence found by it, the wait bounds for a pooled connection, the
// lock_timeout kept back under a deadline, the multiplexed set's waits for
// connections being opened — tested in a synctest bubble against
// fakeBackend, where time is exact. Real-server tests assert only what
// holds at any speed.

// checkGaps fails t unless pings, the times a lock's connection was
// checked after it was acquired at from, came every interval to 1¼
// intervals.
func checkGaps(t *testing.T, from time.Time, pings []time.Time, interval time.Duration) {
	t.Helper()
	prev := from
	for i, p := range pings {
		if gap := p.Sub(prev); gap < interval || gap > interval+interval/4 {
			t.Fatalf("check %d came %v after the one before (or the grant); want every %v to %v", i, gap, interval, interval+interval/4)
		}
		prev = p
	}
}

// TestKeepaliveChecksEveryIntervalToAQuarterMore: a held lock's connection
// is checked every keepalive interval to 1¼ intervals, from one timer,
// and never after Release.
func TestKeepaliveChecksEveryIntervalToAQuarterMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 2 * time.Second
		b := newFakeBackend(4, 0)
		l := fakeLocker(b, WithKeepalive(interval))
		ctx := context.Background()
		var locks []*Lock
		for i := range 3 {
			lk, err := l.Lock(ctx, KeyInt(int64(i)))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, lk)
			time.Sleep(interval / 3) // grants at different phases of the keeper's tick
		}
		time.Sleep(20 * interval)
		var pids []int32
		for _, lk := range locks {
			pid := sessionOf(lk).pid
			pids = append(pids, pid)
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			pings := b.pingsOf(pid)
			if len(pings) < 16 {
				t.Fatalf("%d checks in 20 intervals, want at least 16", len(pings))
			}
			checkGaps(t, lk.acquired, pings, interval)
		}
		after := time.Now()
		time.Sleep(5 * interval)
		for _, pid := range pids {
			for _, p := range b.pingsOf(pid) {
				if p.After(after) {
					t.Fatal("a released lock's connection was checked")
				}
			}
		}
	})
}

// TestLossIsReportedByTheNextCheck: a held lock whose connection fails
// (a reset, a terminated backend) is reported within 1¼ keepalive
// intervals: Lost closes, Err and Release match ErrLost, and the
// connection is destroyed, whenever in the interval it fails.
func TestLossIsReportedByTheNextCheck(t *testing.T) {
	const interval = time.Second
	for _, after := range []time.Duration{0, interval / 10, interval / 2, interval - time.Millisecond, 3*interval + interval/3} {
		t.Run(after.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newFakeBackend(4, 0)
				l := fakeLocker(b, WithKeepalive(interval))
				ctx := context.Background()
				lk, err := l.Lock(ctx, KeyOf("loss"))
				if err != nil {
					t.Fatal(err)
				}
				s := sessionOf(lk)
				time.Sleep(after)
				s.kill()
				failed := time.Now()
				<-lk.Lost()
				if d := time.Since(failed); d > interval+interval/4 {
					t.Fatalf("Lost closed %v after the connection failed, want within 1¼ intervals (%v)", d, interval+interval/4)
				}
				if !errors.Is(lk.Err(), ErrLost) || !errors.Is(lk.Err(), errFakeReset) {
					t.Fatalf("Err after the loss: %v, want ErrLost with the cause", lk.Err())
				}
				if err := lk.Release(ctx); !errors.Is(err, ErrLost) {
					t.Fatalf("Release after the loss: %v, want ErrLost", err)
				}
				if n := b.connsInUse(); n != 0 {
					t.Fatalf("%d connections out of the pool after the loss", n)
				}
			})
		})
	}
}

// TestSilentConnectionIsLostAfterACheckWaitedItsBound: a connection that
// stops answering (no error, no reset) is reported lost once a check has
// waited max(interval, 1 s) for its answer — not earlier, and not later
// than the next check's start plus that bound.
func TestSilentConnectionIsLostAfterACheckWaitedItsBound(t *testing.T) {
	for _, interval := range []time.Duration{200 * time.Millisecond, 2 * time.Second} {
		t.Run(interval.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newFakeBackend(4, 0)
				l := fakeLocker(b, WithKeepalive(interval))
				ctx := context.Background()
				lk, err := l.Lock(ctx, KeyOf("silent"))
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(interval / 3)
				sessionOf(lk).mute()
				muted := time.Now()
				<-lk.Lost()
				bound := pingTimeout(interval)
				if d := time.Since(muted); d < bound || d > interval+interval/4+bound {
					t.Fatalf("Lost closed %v after the connection went silent, want between %v and %v", d, bound, interval+interval/4+bound)
				}
				if err := lk.Release(ctx); !errors.Is(err, ErrLost) {
					t.Fatalf("Release after the loss: %v, want ErrLost", err)
				}
			})
		})
	}
}

// TestSharedConnectionLossLosesItsLocksByTheNextCheck: with
// WithMultiplexing, one check per shared connection stands for all of its
// locks: when it fails, every lock on it is lost within 1¼ intervals, and
// the locks on the set's other connection are not.
func TestSharedConnectionLossLosesItsLocksByTheNextCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		b := newFakeBackend(8, 10*time.Millisecond)
		l := fakeLocker(b, WithKeepalive(interval), WithMultiplexing(2))
		ctx := context.Background()
		// Two concurrent try-onces open both connections of the set;
		// sequential ones then go to the one with fewer locks.
		var locks []*Lock
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				lk, err := l.TryLock(ctx, KeyInt(int64(i)))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				locks = append(locks, lk)
				mu.Unlock()
			})
		}
		wg.Wait()
		for i := range 20 {
			lk, err := l.TryLock(ctx, KeyInt(int64(100+i)))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, lk)
		}
		on := map[*fakeSession][]*Lock{}
		for _, lk := range locks {
			on[sessionOf(lk)] = append(on[sessionOf(lk)], lk)
		}
		if len(on) != 2 {
			t.Fatalf("22 locks on %d connections, want the set's 2", len(on))
		}
		var victim, survivor *fakeSession
		for s := range on {
			if victim == nil {
				victim = s
			} else {
				survivor = s
			}
		}
		time.Sleep(interval / 2)
		victim.kill()
		failed := time.Now()
		for _, lk := range on[victim] {
			<-lk.Lost()
		}
		if d := time.Since(failed); d > interval+interval/4 {
			t.Fatalf("the shared connection's locks were lost %v after it failed, want within 1¼ intervals", d)
		}
		time.Sleep(5 * interval)
		for _, lk := range on[survivor] {
			if lk.Err() != nil {
				t.Fatalf("a lock on the surviving connection reports %v", lk.Err())
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, lk := range on[victim] {
			if err := lk.Release(ctx); !errors.Is(err, ErrLost) {
				t.Fatalf("Release of a lost shared lock: %v, want ErrLost", err)
			}
		}
		if n := b.connsInUse(); n != 0 {
			t.Fatalf("%d connections out of the pool at the end", n)
		}
	})
}

// TestColdBurstOfTryOncesWaitsOnlyForTheSetToOpen is the timing side of
// TestMultiplexedColdBurstOfTryOncesStaysOnTheSet: on a fresh set of 4, a
// pool of 8 whose connections take 10 ms to open, 32 goroutines taking
// 2,000 free keys at once — no TryLock waits longer than it takes to open
// one connection, exactly, and the set opens no more than its 4.
func TestColdBurstOfTryOncesWaitsOnlyForTheSetToOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const dial = 10 * time.Millisecond
		b := newFakeBackend(8, dial)
		l := fakeLocker(b, WithMultiplexing(4))
		ctx := context.Background()
		const workers, keys = 32, 2000
		locks := make([]*Lock, keys)
		var mu sync.Mutex
		var longest time.Duration
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := w; i < keys; i += workers {
					start := time.Now()
					lk, err := l.TryLock(ctx, KeyInt(int64(i)))
					if err != nil {
						t.Error(err)
						return
					}
					locks[i] = lk
					mu.Lock()
					longest = max(longest, time.Since(start))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if longest > dial {
			t.Fatalf("a TryLock waited %v, longer than opening a connection (%v)", longest, dial)
		}
		if b.openedConns() > 4 || b.connsInUse() > 4 {
			t.Fatalf("%d connections opened, %d out of the pool; want at most the set's 4", b.openedConns(), b.connsInUse())
		}
		for _, lk := range locks {
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := b.connsInUse(); n != 0 {
			t.Fatalf("%d connections out of the pool after every release", n)
		}
	})
}

// TestWaitForAPooledConnectionEndsAtTheBound: an acquisition that finds
// the pool exhausted waits for a connection until the wait bound, exactly
// — the Locker's own (ErrConnTimeout, not DeadlineExceeded) or the caller's
// earlier deadline (then it also matches DeadlineExceeded) — and gets one
// as soon as one comes back.
func TestWaitForAPooledConnectionEndsAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeBackend(1, 0)
		l := fakeLocker(b, WithTimeout(300*time.Millisecond))
		ctx := context.Background()
		held, err := l.Lock(ctx, KeyInt(1))
		if err != nil {
			t.Fatal(err)
		}
		for _, acquire := range []func(context.Context, Key) (*Lock, error){l.Lock, l.TryLock, l.RLock, l.TryRLock} {
			start := time.Now()
			_, err := acquire(ctx, KeyInt(2))
			if !errors.Is(err, ErrConnTimeout) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("with the pool exhausted: %v, want ErrConnTimeout (the Locker's bound)", err)
			}
			if d := time.Since(start); d != 300*time.Millisecond {
				t.Fatalf("the wait for a connection ended after %v, want the bound, 300ms", d)
			}
		}
		dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		start := time.Now()
		_, err = l.TryLock(dctx, KeyInt(2))
		cancel()
		if !errors.Is(err, ErrConnTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("with the pool exhausted under a deadline: %v, want ErrConnTimeout matching DeadlineExceeded", err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Fatalf("the wait under a 100ms deadline ended after %v", d)
		}
		got := make(chan error, 1)
		go func() {
			lk, err := l.TryLock(ctx, KeyInt(2))
			if err == nil {
				err = lk.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond)
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("a wait for a connection that came back: %v", err)
		}
		if d := time.Since(released); d != 0 {
			t.Fatalf("the waiter got the connection %v after it came back", d)
		}
	})
}

var lockTimeoutIn = regexp.MustCompile(`lock_timeout = (\d+);`)

// TestDeadlineWaitKeepsTheMeasuredRoundTripsBack: under the caller's
// deadline, a fresh Locker whose first-use probe measured 200 ms round
// trips (100 ms each way) sends a lock_timeout that ends the wait on the
// server at least 3.5 of them before the deadline (waitbound's reserve
// before the first hold), so the 55P03 comes back in time over that
// network.
func TestDeadlineWaitKeepsTheMeasuredRoundTripsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt = 200 * time.Millisecond
		b := newFakeBackend(4, 0)
		l := fakeLocker(b)
		for range 3 { // the probe's round trips
			l.est.ObserveRTT(rtt)
		}
		var sent []string
		var mu sync.Mutex
		b.onExec = func(q string) {
			mu.Lock()
			sent = append(sent, q)
			mu.Unlock()
		}
		lockTimeout := func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			m := lockTimeoutIn.FindStringSubmatch(sent[len(sent)-1])
			if m == nil {
				t.Fatalf("no lock_timeout in %q", sent[len(sent)-1])
			}
			ms, _ := strconv.Atoi(m[1])
			return time.Duration(ms) * time.Millisecond
		}
		const deadline = 3 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		lk, err := l.Lock(ctx, KeyInt(1))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if kept := deadline - lockTimeout(); kept < 7*rtt/2 {
			t.Fatalf("the first deadline-bound wait kept %v back, want at least 3.5 round trips (%v)", kept, 7*rtt/2)
		}
		lk.Release(context.Background())
	})
}
