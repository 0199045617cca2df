package locktest

import (
	"context"
	"errors"
	"testing"

	"github.com/sqlock/sqlock"
)

// notHeld reports whether err is what Release of a lock no longer held
// returns: the backend's not-held error or ErrLost.
func (s *suite) notHeld(err error) bool {
	return errors.Is(err, s.b.NotHeld) || errors.Is(err, sqlock.ErrLost)
}

// testRelease: Release is owner-checked and idempotent. A released lock's
// second Release reports the backend's not-held error and leaves alone the
// holder who took the name meanwhile; a Release on a cancelled context
// still releases; a Release closes no Lost and sets no Err.
func testRelease(t *testing.T, s *suite) {
	ctx := context.Background()
	name := s.name("release")
	a, b, c := s.acquirer(Options{}), s.acquirer(Options{}), s.acquirer(Options{})

	first := must[sqlock.Lock](t, "TryAcquire")(a.TryAcquire(ctx, name))
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if isLost(first) || first.Err() != nil {
		t.Errorf("after a Release: Lost closed %t, Err %v; a Release closes no Lost", isLost(first), first.Err())
	}
	second := must[sqlock.Lock](t, "TryAcquire by another holder after the release")(b.TryAcquire(ctx, name))
	if err := first.Release(ctx); !s.notHeld(err) {
		t.Errorf("a second Release: %s; want the backend's not-held error or ErrLost", describe(err))
	}
	if lk, err := c.TryAcquire(ctx, name); !errors.Is(err, sqlock.ErrNotAcquired) {
		if lk != nil {
			lk.Release(ctx)
		}
		t.Fatalf("a second Release by the old holder released the new holder's lock: TryAcquire %s", describe(err))
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := second.Release(cancelled); err != nil {
		t.Fatalf("Release on a cancelled context: %v; it must run with a bound of its own", err)
	}
	third := must[sqlock.Lock](t, "TryAcquire after a Release on a cancelled context")(c.TryAcquire(ctx, name))
	release(t, third)
}

// testContext: a lock's Context ends when its cancel is called or its
// parent ends, not before, and the lock is still trusted after either;
// a fenced lock's Context carries its token.
func testContext(t *testing.T, s *suite) {
	ctx := context.Background()
	lk := must[sqlock.Lock](t, "TryAcquire")(s.acquirer(Options{}).TryAcquire(ctx, s.name("context")))
	defer release(t, lk)

	lctx, cancel := lk.Context(ctx)
	if err := lctx.Err(); err != nil {
		t.Fatalf("the Context of a trusted lock has ended: %v", err)
	}
	if f, ok := lk.(sqlock.Fenced); ok {
		if tok, ok := sqlock.FencingToken(lctx); !ok || tok != f.Token() {
			t.Errorf("the Context carries token %d (%t), the lock's is %d", tok, ok, f.Token())
		}
	}
	cancel()
	if !errors.Is(lctx.Err(), context.Canceled) {
		t.Errorf("after cancel the Context's error is %v, want context.Canceled", lctx.Err())
	}

	parent, cancelParent := context.WithCancel(ctx)
	lctx, cancel = lk.Context(parent)
	defer cancel()
	cancelParent()
	<-lctx.Done()
	if lk.Err() != nil || isLost(lk) {
		t.Errorf("ending a Context ended the lock: Err %v", lk.Err())
	}
}
