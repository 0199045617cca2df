package locktest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
)

// checkFresh fails t unless lk is a just-granted lock as the backend
// declared it: trusted (Err nil, Lost open), and a sqlock.Fenced with a
// positive token exactly when the backend is fenced.
func (s *suite) checkFresh(t testing.TB, lk sqlock.Lock) {
	t.Helper()
	if lk == nil {
		t.Fatal("a granted acquisition returned a nil Lock")
	}
	if err := lk.Err(); err != nil {
		t.Fatalf("Err of a lock just granted: %v", err)
	}
	if isLost(lk) {
		t.Fatal("Lost of a lock just granted is closed")
	}
	f, fenced := lk.(sqlock.Fenced)
	switch {
	case fenced != s.b.Caps.Fenced:
		t.Fatalf("the lock (%T) is a sqlock.Fenced: %t; the backend declares Fenced: %t", lk, fenced, s.b.Caps.Fenced)
	case fenced && f.Token() <= 0:
		t.Fatalf("fencing token %d: must be positive (the fenced writes refuse others)", f.Token())
	}
}

// tokenOf is lk's fencing token, 0 for a backend that is not fenced.
func tokenOf(lk sqlock.Lock) int64 {
	if f, ok := lk.(sqlock.Fenced); ok {
		return f.Token()
	}
	return 0
}

// testTryAcquire: TryAcquire takes a free name; on a held one it returns
// ErrNotAcquired — from another holder and from the holder's own Acquirer
// alike — at once: the holder releases only after the refusals returned,
// with a wait bound of an hour that they did not use. After the release the
// name is free again.
func testTryAcquire(t *testing.T, s *suite) {
	ctx := context.Background()
	name := s.name("try")
	a, b := s.acquirer(Options{Timeout: time.Hour}), s.acquirer(Options{Timeout: time.Hour})
	lk := must[sqlock.Lock](t, "TryAcquire of a free name")(a.TryAcquire(ctx, name))
	s.checkFresh(t, lk)
	for who, acq := range map[string]sqlock.Acquirer{"another holder": b, "the holder's own Acquirer": a} {
		got, err := acq.TryAcquire(ctx, name)
		if !errors.Is(err, sqlock.ErrNotAcquired) || errors.Is(err, sqlock.ErrTimeout) || got != nil {
			lk.Release(ctx)
			t.Fatalf("TryAcquire by %s of a held name: %v, %s; want nil and an error matching ErrNotAcquired only", who, got, describe(err))
		}
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	next := must[sqlock.Lock](t, "TryAcquire after the release")(b.TryAcquire(ctx, name))
	s.checkFresh(t, next)
	release(t, next)
}

// testAcquireWaits: waiters in Acquire (each its own holder) are granted
// the name only after the holder began its Release, one after another,
// never two at once — and, where the backend is fenced, each with a larger
// token than the one before.
func testAcquireWaits(t *testing.T, s *suite) {
	ctx := context.Background()
	name := s.name("wait")
	holder := must[sqlock.Lock](t, "Acquire of a free name")(s.acquirer(Options{}).Acquire(ctx, name))
	s.checkFresh(t, holder)
	const waiters = 4
	var (
		released atomic.Bool
		inside   atomic.Int32
		mu       sync.Mutex
		tokens   = []int64{tokenOf(holder)}
		wg       sync.WaitGroup
		started  sync.WaitGroup
	)
	errs := make(chan error, waiters)
	started.Add(waiters)
	for range waiters {
		acq := s.acquirer(Options{})
		wg.Go(func() {
			started.Done()
			lk, err := acq.Acquire(ctx, name)
			if err != nil {
				errs <- err
				return
			}
			if !released.Load() {
				errs <- errors.New("a waiter was granted the name while its holder held it")
			}
			if inside.Add(1) != 1 {
				errs <- errors.New("two waiters hold the name at once")
			}
			if lk.Err() != nil || isLost(lk) {
				errs <- errors.New("a waiter's granted lock is not trusted")
			}
			mu.Lock()
			tokens = append(tokens, tokenOf(lk))
			mu.Unlock()
			inside.Add(-1)
			if err := lk.Release(ctx); err != nil {
				errs <- err
			}
		})
	}
	started.Wait()
	time.Sleep(20 * time.Millisecond) // most waiters are waiting by now; none must be granted
	released.Store(true)
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("the holder's Release: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s.b.Caps.Fenced {
		checkIncreasing(t, tokens)
	}
}

// testExclusionAmongGoroutines: 8 goroutines, half sharing one Acquirer
// and half with their own, take two names 6 times each, by Acquire and by
// TryAcquire (retrying after ErrNotAcquired); no two are ever inside one
// name's section, and every section ran. Fenced tokens grow from section to
// section of a name.
func testExclusionAmongGoroutines(t *testing.T, s *suite) {
	ctx := context.Background()
	const goroutines, rounds, names = 8, 6, 2
	shared := s.acquirer(Options{})
	var (
		inside   [names]atomic.Int32
		sections atomic.Int32
		mu       sync.Mutex
		tokens   [names][]int64
		wg       sync.WaitGroup
	)
	errs := make(chan error, goroutines*rounds)
	for g := range goroutines {
		acq := shared
		if g%2 == 1 {
			acq = s.acquirer(Options{})
		}
		wg.Go(func() {
			for r := range rounds {
				k := rand.IntN(names)
				name := s.name("excl:" + string(rune('a'+k)))
				var lk sqlock.Lock
				var err error
				if r%2 == 0 {
					lk, err = acq.Acquire(ctx, name)
				} else {
					for {
						lk, err = acq.TryAcquire(ctx, name)
						if !errors.Is(err, sqlock.ErrNotAcquired) {
							break
						}
						time.Sleep(time.Millisecond)
					}
				}
				if err != nil {
					errs <- err
					continue
				}
				if inside[k].Add(1) != 1 {
					errs <- errors.New("two goroutines inside one name's section")
				}
				mu.Lock()
				tokens[k] = append(tokens[k], tokenOf(lk))
				mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // the work
				inside[k].Add(-1)
				sections.Add(1)
				if err := lk.Release(ctx); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := sections.Load(); n != goroutines*rounds {
		t.Errorf("%d sections ran, want %d", n, goroutines*rounds)
	}
	if s.b.Caps.Fenced {
		for k := range names {
			checkIncreasing(t, tokens[k])
		}
	}
}

// checkIncreasing fails t unless tokens, in the order their holders held
// the lock, strictly increase.
func checkIncreasing(t testing.TB, tokens []int64) {
	t.Helper()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("holder %d of the name got token %d after %d: tokens must strictly increase (%v)", i, tokens[i], tokens[i-1], tokens)
			return
		}
	}
}
