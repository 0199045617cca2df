package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/observe"
)

// panicOnceOnAcquired panics with itself on the first acquired event it
// is told of.
type panicOnceOnAcquired struct{ done atomic.Bool }

func (p *panicOnceOnAcquired) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.LockAcquire && e.Outcome == observe.Acquired && p.done.CompareAndSwap(false, true) {
		panic(p)
	}
}

// TestObserverPanicOnAcquiredReleasesTheLease: an observer that panics on
// the acquired event gets its panic back with the lease already released:
// its row is no longer live as the panic propagates, another Manager gets
// it at once, and no renewal follows — the row's expiry stays where the
// release put it while a lease taken after the panic on the same Manager
// (whose renewals share its timers, due later) is renewed three times.
func TestObserverPanicOnAcquiredReleasesTheLease(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := context.Background()
	// Three renewals to wait for (one TTL). The witness is renewed every
	// TTL/3 with two thirds of a TTL to spare: 4 s of stall beside CPU hogs
	// still leave it held; a 1 s TTL gave 0.6 s.
	const ttl = 6 * time.Second
	obs := new(panicOnceOnAcquired)
	m := lease.New(openPool(t, db.DSN), lease.WithObserver(obs))
	var got any
	func() {
		defer func() { got = recover() }()
		m.Acquire(ctx, "panicked", ttl)
	}()
	if got != obs {
		t.Fatalf("recovered %v, want the observer's own panic", got)
	}
	released := readRow(t, conn, "panicked")
	if released.live {
		t.Fatal("the lease outlived the panic")
	}
	witness := must[*lease.Lease](t)(m.Acquire(ctx, "witness", ttl))
	defer witness.Release(ctx)
	last, renewals := readRow(t, conn, "witness").expiresAt, 0
	for renewals < 3 {
		if err := witness.Err(); err != nil {
			t.Fatalf("the witness lost its lease: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
		if e := readRow(t, conn, "witness").expiresAt; e.After(last) {
			last, renewals = e, renewals+1
		}
	}
	if r := readRow(t, conn, "panicked"); r.live || !r.expiresAt.Equal(released.expiresAt) || r.owner != released.owner {
		t.Fatalf("after the panic the lease's row changed: %+v, released as %+v", r, released)
	}
	l := must[*lease.Lease](t)(lease.New(openPool(t, db.DSN)).TryAcquire(ctx, "panicked", ttl))
	l.Release(ctx)
}
