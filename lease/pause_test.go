package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeHeld is a backend whose lease is always held by someone else, with
// remaining µs left (as the acquire statement reports it), and that can
// LISTEN if listens: it records when each acquire statement was sent. It is
// for the waiter's timer logic under synctest, where time is exact.
type fakeHeld struct {
	acquire   string
	place     string
	remaining int64
	ahead     int64 // live tickets ahead of the waiter's (the nearest: ticket 1)
	listens   bool

	mu    sync.Mutex
	tries []time.Time
}

func (f *fakeHeld) queryRow(_ context.Context, query string, _ []any, dest ...any) error {
	if query != f.acquire && query != f.place {
		return errors.New("fake: unexpected statement")
	}
	f.mu.Lock()
	f.tries = append(f.tries, time.Now())
	f.mu.Unlock()
	if query == f.place {
		*dest[0].(*int64), *dest[1].(*int64) = f.ahead, min(f.ahead, 1)
		return nil
	}
	*dest[0].(*int64), *dest[1].(*int64) = 0, f.remaining
	*dest[2].(*int64), *dest[3].(*int64), *dest[4].(*int64) = f.ahead+1, f.ahead, min(f.ahead, 1)
	return nil
}

func (f *fakeHeld) exec(context.Context, string) error { return errors.New("fake: unexpected exec") }

func (f *fakeHeld) listen(ctx context.Context, _ string, _ func(querier) error, ready func(), _ func(string)) error {
	if !f.listens {
		return errNoListen
	}
	ready()
	<-ctx.Done()
	return errListenDone
}

func (f *fakeHeld) inTx(context.Context, func(querier) error) error {
	return errors.New("fake: unexpected transaction")
}

// gaps are the pauses between the tries.
func (f *fakeHeld) gaps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(f.tries); i++ {
		g = append(g, f.tries[i].Sub(f.tries[i-1]))
	}
	return g
}

// waitOnFake runs one Acquire of a lease f says is held, on a Manager with
// opts, until its wait bound, and returns f's gaps between tries.
func waitOnFake(t *testing.T, f *fakeHeld, opts ...Option) []time.Duration {
	t.Helper()
	cfg, err := buildConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{b: f, cfg: cfg, stmt: buildStatements(cfg.table)}
	m.base.Init(&kit, cfg.Config, nil)
	f.acquire, f.place = m.stmt.acquire, m.stmt.place
	if cfg.poll == 0 {
		m.ntf = newNotifier(f, cfg.table.channel())
	}
	start := time.Now()
	_, err = m.Acquire(context.Background(), "held", time.Minute)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Acquire of a held lease: %v, want ErrTimeout", err)
	}
	if took := time.Since(start); took != cfg.Timeout {
		t.Fatalf("the wait ended after %v, not at its bound %v", took, cfg.Timeout)
	}
	return f.gaps()
}

// checkGaps fails unless every gap but the listening waiter's first (the
// try right after LISTEN, skip of them) is within [lo, hi].
func checkGaps(t *testing.T, gaps []time.Duration, skip int, lo, hi time.Duration) {
	t.Helper()
	if len(gaps) <= skip {
		t.Fatalf("%d tries", len(gaps)+1)
	}
	for i, g := range gaps[skip:] {
		if g < lo || g > hi {
			t.Fatalf("pause %d: %v, want within [%v, %v] (all: %v)", i+1, g, lo, hi, gaps)
		}
	}
}

// A polling waiter behind others in the queue pauses a random time in
// [interval/2, interval] between tries, and its wait ends exactly at
// WithTimeout's bound.
func TestPollingWaiterPausesHalfToOneInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeHeld{remaining: time.Hour.Microseconds(), ahead: 2}
		gaps := waitOnFake(t, f, WithPolling(100*time.Millisecond), WithTimeout(10*time.Second))
		checkGaps(t, gaps, 0, 50*time.Millisecond, 100*time.Millisecond)
		if n := len(gaps) + 1; n < 100 || n > 201 {
			t.Fatalf("%d tries in 10 s of 50–100 ms pauses", n)
		}
	})
}

// The polling waiters at the head of the queue and next to it pause a
// random time in [interval/8, interval/4]: a release is noticed by the
// head's poll alone.
func TestPollingWaitersAtTheHeadPollFourTimesAsOften(t *testing.T) {
	for _, ahead := range []int64{0, 1} {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeHeld{remaining: time.Hour.Microseconds(), ahead: ahead}
			gaps := waitOnFake(t, f, WithPolling(100*time.Millisecond), WithTimeout(10*time.Second))
			checkGaps(t, gaps, 0, 12500*time.Microsecond, 25*time.Millisecond)
		})
	}
}

// Without WithPolling, a waiter that cannot LISTEN polls every 25–50 ms.
func TestWaiterThatCannotListenPollsByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeHeld{remaining: time.Hour.Microseconds(), ahead: 2}
		gaps := waitOnFake(t, f, WithTimeout(time.Second))
		checkGaps(t, gaps, 0, defaultPoll/2, defaultPoll)
	})
}

// A listening waiter that hears nothing tries again after the safety poll;
// the first try after LISTEN comes at once.
func TestListeningWaiterTriesAgainAfterTheSafetyPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeHeld{remaining: time.Hour.Microseconds(), listens: true}
		gaps := waitOnFake(t, f, WithTimeout(5*time.Second))
		if gaps[0] != 0 {
			t.Fatalf("the try after LISTEN came %v later", gaps[0])
		}
		checkGaps(t, gaps, 1, safetyPoll, safetyPoll)
	})
}

// A waiter never sleeps past the holder's expiry (the time the server said
// it has left, plus a grace of 2–4 ms), listening or polling.
func TestWaiterPausesNoLongerThanTheHolderHasLeft(t *testing.T) {
	for _, listens := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeHeld{remaining: (30 * time.Millisecond).Microseconds(), listens: listens}
			var opts []Option
			if !listens {
				opts = append(opts, WithPolling(time.Second))
			}
			gaps := waitOnFake(t, f, append(opts, WithTimeout(time.Second))...)
			skip := 0
			if listens {
				skip = 1
			}
			checkGaps(t, gaps, skip, 30*time.Millisecond+expiryGrace, 30*time.Millisecond+2*expiryGrace)
		})
	}
}

// A holder the server just saw expire (someone quicker took it, or its row
// is being written) is tried again within 2.5–7.5 ms.
func TestWaiterRetriesSoonAfterAnExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeHeld{remaining: 0}
		gaps := waitOnFake(t, f, WithPolling(time.Second), WithTimeout(time.Second))
		checkGaps(t, gaps, 0, retrySoon/2, retrySoon/2+retrySoon)
	})
}
