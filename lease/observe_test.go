package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/observe"
)

// A Manager's observer sees what advisory's sees, under Source "lease",
// System "postgresql" and the lease's name: each acquisition's outcome (acquired, busy, timeout)
// with its wait, each release with its hold time, and a lease taken over
// on the server as one loss — not followed by a release event.
func TestObserverSeesWaitsHoldsAndLossesOfLeases(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	var evs observetest.Recorder
	m := lease.New(openPool(t, db.DSN), lease.WithObserver(&evs))
	other := lease.New(openPool(t, db.DSN), lease.WithObserver(&evs))
	// Only the wait is this short: a TryAcquire is bounded by the timeout
	// too, and on a starved machine one statement can take longer.
	waiter := lease.New(openPool(t, db.DSN), lease.WithObserver(&evs), lease.WithTimeout(50*time.Millisecond))

	l := must[*lease.Lease](t)(m.Acquire(ctx, "report:nightly", time.Minute))
	if _, err := other.TryAcquire(ctx, "report:nightly", time.Minute); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatal(err)
	}
	if _, err := waiter.Acquire(ctx, "report:nightly", time.Minute); !errors.Is(err, lease.ErrTimeout) {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := evs.Events()
	want := []struct {
		kind    observe.Kind
		outcome observe.Outcome
	}{
		{observe.LockAcquire, observe.Acquired}, {observe.LockAcquire, observe.Busy},
		{observe.LockAcquire, observe.Timeout}, {observe.LockRelease, observe.Released},
	}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		if e.Kind != w.kind || e.Outcome != w.outcome || e.Source != "lease" || e.System != "postgresql" || e.Name != "report:nightly" {
			t.Errorf("event %d: %+v, want %v %v", i, e, w.kind, w.outcome)
		}
	}
	if got[0].Wait <= 0 || got[2].Wait < 50*time.Millisecond || got[3].Hold <= 0 {
		t.Errorf("waits and hold: %v %v %v", got[0].Wait, got[2].Wait, got[3].Hold)
	}

	// Taken over on the server: the next renewal is refused.
	evs.Reset()
	ttl := 600 * time.Millisecond
	l = must[*lease.Lease](t)(m.Acquire(ctx, "report:nightly", ttl))
	expireOnServer(t, admin(t, db), "report:nightly")
	thief := must[*lease.Lease](t)(other.TryAcquire(ctx, "report:nightly", time.Minute))
	defer thief.Release(ctx)
	select {
	case <-l.Lost():
	case <-time.After(time.Until(l.Deadline()) + 10*time.Second):
		t.Fatal("a lease taken over was not reported lost")
	}
	if err := l.Release(ctx); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Release of a lost lease: %v", err)
	}
	if n := evs.Count(observe.LockRelease, observe.OutcomeNone); n != 1 {
		t.Fatalf("%d release events for one lost lease: %+v", n, evs.Events())
	}
	for _, e := range evs.Events() {
		if e.Kind == observe.LockRelease && (e.Outcome != observe.Lost || !errors.Is(e.Err, lease.ErrLost) || e.Name != "report:nightly") {
			t.Fatalf("loss event: %+v", e)
		}
	}
}
