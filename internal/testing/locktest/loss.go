package locktest

import (
	"context"
	"errors"
	"testing"

	"github.com/sqlock/sqlock"
)

// testLoss: after the backend's own fault (Harness.Lose) the holder finds
// out: Lost closes, Err matches ErrLost, a Context made before the loss
// ends with a cause matching ErrLost, and so does one made after it. Another holder gets the name (with a larger token where
// fenced), and the old holder's Release reports the loss — not-held or
// ErrLost — without touching the new holder's lock.
func testLoss(t *testing.T, s *suite) {
	ctx := context.Background()
	name := s.name("loss")
	lk := must[sqlock.Lock](t, "TryAcquire")(s.h.New(Options{TTL: lossTTL, Timeout: roomyWait}).TryAcquire(ctx, name))
	s.checkFresh(t, lk)
	before, cancel := lk.Context(ctx)
	defer cancel()
	if err := s.h.Lose(ctx, name, lk); err != nil {
		lk.Release(ctx)
		t.Fatalf("the backend's Lose: %v", err)
	}
	<-lk.Lost()
	if err := lk.Err(); !errors.Is(err, sqlock.ErrLost) {
		t.Errorf("Err after the loss: %s; want an error matching ErrLost", describe(err))
	}
	<-before.Done()
	if cause := context.Cause(before); !errors.Is(cause, sqlock.ErrLost) {
		t.Errorf("a Context made before the loss ended with cause %s; want one matching ErrLost", describe(cause))
	}
	after, cancelAfter := lk.Context(ctx)
	defer cancelAfter()
	<-after.Done() // it may end a moment after Context returns, never later
	if cause := context.Cause(after); !errors.Is(cause, sqlock.ErrLost) {
		t.Errorf("a Context made after the loss ended with cause %s; want one matching ErrLost", describe(cause))
	}

	next := must[sqlock.Lock](t, "Acquire by another holder after the loss")(s.acquirer(Options{}).Acquire(ctx, name))
	defer release(t, next)
	if s.b.Caps.Fenced && tokenOf(next) <= tokenOf(lk) {
		t.Errorf("the holder after the loss got token %d, not above the lost holder's %d", tokenOf(next), tokenOf(lk))
	}
	if err := lk.Release(ctx); !s.notHeld(err) {
		t.Errorf("Release of the lost lock: %s; want the backend's not-held error or ErrLost", describe(err))
	}
	if other, err := s.acquirer(Options{}).TryAcquire(ctx, name); !errors.Is(err, sqlock.ErrNotAcquired) {
		if other != nil {
			other.Release(ctx)
		}
		t.Fatalf("the lost holder's Release freed the new holder's name: TryAcquire %s", describe(err))
	}
}

// testFencingTokens: where the backend is fenced, holders taking one name
// in turn from three Acquirers, by Acquire and TryAcquire, get strictly
// increasing tokens (the other tests check the same under contention and
// across a loss). Where it is not, no lock of any kind of acquisition is a
// sqlock.Fenced: the declared difference holds.
func testFencingTokens(t *testing.T, s *suite) {
	ctx := context.Background()
	name := s.name("tokens")
	acqs := []sqlock.Acquirer{s.acquirer(Options{}), s.acquirer(Options{}), s.acquirer(Options{})}
	var tokens []int64
	for i := range 12 {
		acq := acqs[i%len(acqs)]
		var lk sqlock.Lock
		if i%2 == 0 {
			lk = must[sqlock.Lock](t, "Acquire")(acq.Acquire(ctx, name))
		} else {
			lk = must[sqlock.Lock](t, "TryAcquire")(acq.TryAcquire(ctx, name))
		}
		s.checkFresh(t, lk)
		tokens = append(tokens, tokenOf(lk))
		release(t, lk)
	}
	if s.b.Caps.Fenced {
		checkIncreasing(t, tokens)
	}
}
