package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
)

// testWaitBound: while the name is held, an Acquire whose own wait bound
// runs out fails with ErrTimeout that does not match
// context.DeadlineExceeded (the caller set no deadline); one whose
// caller's deadline passes first fails with ErrTimeout that matches it;
// one whose caller cancels fails with context.Canceled, not ErrTimeout.
// None took the lock: the holder still holds it, and after its release the
// name is free at once.
func testWaitBound(t *testing.T, s *suite) {
	ctx := context.Background()
	name := s.name("bound")
	holder := must[sqlock.Lock](t, "Acquire of a free name")(s.acquirer(Options{}).Acquire(ctx, name))
	defer holder.Release(ctx)

	ownBound := s.acquirer(Options{Timeout: shortWait})
	lk, err := ownBound.Acquire(ctx, name)
	if lk != nil || !errors.Is(err, sqlock.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sqlock.ErrNotAcquired) {
		t.Errorf("Acquire whose WithTimeout ran out: %v, %s; want nil and ErrTimeout, not DeadlineExceeded", lk, describe(err))
	}

	callerBound := s.acquirer(Options{Timeout: time.Hour})
	dctx, cancel := context.WithTimeout(ctx, shortWait)
	lk, err = callerBound.Acquire(dctx, name)
	cancel()
	if lk != nil || !errors.Is(err, sqlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire whose caller's deadline passed: %v, %s; want nil and ErrTimeout matching DeadlineExceeded", lk, describe(err))
	}

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(shortWait, cancel)
	lk, err = callerBound.Acquire(cctx, name)
	cancel()
	if lk != nil || !errors.Is(err, context.Canceled) || errors.Is(err, sqlock.ErrTimeout) {
		t.Errorf("Acquire whose caller cancelled: %v, %s; want nil and context.Canceled, not ErrTimeout", lk, describe(err))
	}

	if lk, err := s.acquirer(Options{}).TryAcquire(ctx, name); !errors.Is(err, sqlock.ErrNotAcquired) {
		if lk != nil {
			lk.Release(ctx)
		}
		t.Fatalf("after the failed waits the holder's name was taken: %s", describe(err))
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("the holder's Release after the waits: %v", err)
	}
	// A wait that ran out holds nothing: the name is free at once.
	next := must[sqlock.Lock](t, "TryAcquire after the holder's release")(callerBound.TryAcquire(ctx, name))
	release(t, next)
}
