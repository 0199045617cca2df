package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// A Locker's observer sees, under Source "redislock", System "redis" and
// the lock's key, each acquisition's outcome with its wait, each release
// with its hold time, and a lock whose key was taken over as one loss, not
// followed by a release event.
func TestObserverSeesWaitsHoldsAndLossesOfRedisLocks(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{})
	c := s.Client(t, nil)
	ctx := context.Background()
	var evs observetest.Recorder
	lk := redislock.New(c, redislock.WithObserver(&evs))

	l := must[*redislock.Lock](t)(lk.Acquire(ctx, "k", time.Minute))
	if _, err := lk.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, redislock.ErrNotAcquired) {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := evs.Events()
	if len(got) != 3 || got[0].Outcome != observe.Acquired || got[1].Outcome != observe.Busy ||
		got[2].Kind != observe.LockRelease || got[2].Outcome != observe.Released || got[2].Hold <= 0 {
		t.Fatalf("events: %+v", got)
	}
	for _, e := range got {
		if e.Source != "redislock" || e.System != "redis" || e.Name != "k" {
			t.Fatalf("event: %+v", e)
		}
	}

	evs.Reset()
	l = must[*redislock.Lock](t)(lk.Acquire(ctx, "k", 300*time.Millisecond))
	if err := c.Set(ctx, "k", "someone else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	<-l.Lost() // bounded by go test -timeout, not by a window of its own
	if err := l.Release(ctx); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("Release of a lost lock: %v", err)
	}
	var ends []observe.Event
	for _, e := range evs.Events() {
		if e.Kind == observe.LockRelease {
			ends = append(ends, e)
		}
	}
	if len(ends) != 1 || ends[0].Outcome != observe.Lost || !errors.Is(ends[0].Err, redislock.ErrLost) {
		t.Fatalf("end events of a lost lock: %+v", ends)
	}
}
