package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock/lease"
)

func TestAcquireExcludesAndReleaseLetsTheNextIn(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		ctx := context.Background()
		m := bc.open(t, db.DSN)
		other := bc.open(t, db.DSN)
		name := "job:" + bc.name
		l1 := must[*lease.Lease](t)(m.Acquire(ctx, name, roomyTTL))
		if l1.Token() <= 0 || l1.Name() != name {
			t.Fatalf("lease %q token %d", l1.Name(), l1.Token())
		}
		_, err := other.TryAcquire(ctx, name, roomyTTL)
		if !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held lease: %v, want ErrNotAcquired", err)
		}
		if err := l1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l2 := must[*lease.Lease](t)(other.TryAcquire(ctx, name, roomyTTL))
		if l2.Token() <= l1.Token() {
			t.Fatalf("token %d after %d: not increasing", l2.Token(), l1.Token())
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l1.Lost():
			t.Fatal("Release closed Lost")
		default:
		}
	})
}

func TestAcquireTimesOutWhileHeld(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		ctx := context.Background()
		m := bc.open(t, db.DSN)
		waiter := bc.open(t, db.DSN, lease.WithTimeout(150*time.Millisecond))
		l := must[*lease.Lease](t)(m.Acquire(ctx, "busy", 5*time.Second))
		defer l.Release(ctx)
		start := time.Now()
		_, err := waiter.Acquire(ctx, "busy", time.Second)
		waited := time.Since(start)
		if !errors.Is(err, lease.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire of a held lease: %v, want ErrTimeout (WithTimeout's, not the context's deadline)", err)
		}
		if waited < 150*time.Millisecond {
			t.Fatalf("gave up after %v, before the 150ms bound", waited)
		}
	})
}

func TestReleaseAfterTakeoverIsNotHeldAndChangesNothing(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		ctx := context.Background()
		m := bc.open(t, db.DSN)
		name := "takeover:" + bc.name
		old := must[*lease.Lease](t)(m.Acquire(ctx, name, 5*time.Second))
		expireOnServer(t, conn, name) // as if old's holder had been paused past its TTL
		taker := must[*lease.Lease](t)(m.TryAcquire(ctx, name, 5*time.Second))
		defer taker.Release(ctx)
		before := readRow(t, conn, name)
		err := old.Release(ctx)
		if !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("Release after takeover: %v, want ErrNotHeld", err)
		}
		after := readRow(t, conn, name)
		if after.owner != before.owner || after.token != taker.Token() || !after.expiresAt.Equal(before.expiresAt) || !after.live {
			t.Fatalf("the refused Release changed the row: %+v → %+v", before, after)
		}
		if err := old.Release(ctx); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("second Release: %v, want ErrNotHeld", err)
		}
	})
}

func TestRenewalAfterTakeoverReportsLost(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := context.Background()
	m := backends[0].open(t, db.DSN)
	old := must[*lease.Lease](t)(m.Acquire(ctx, "renew", 300*time.Millisecond))
	expireOnServer(t, conn, "renew")
	taker := must[*lease.Lease](t)(m.TryAcquire(ctx, "renew", 5*time.Second))
	defer taker.Release(ctx)
	select {
	case <-old.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not fire after the lease was taken over")
	}
	if !errors.Is(old.Err(), lease.ErrLost) {
		t.Fatalf("Err() = %v, want ErrLost", old.Err())
	}
	lctx, cancel := old.Context(ctx)
	defer cancel()
	if !errors.Is(context.Cause(lctx), lease.ErrLost) {
		t.Fatalf("Context's cause %v, want ErrLost", context.Cause(lctx))
	}
	old.Release(ctx)
	if r := readRow(t, conn, "renew"); r.token != taker.Token() || !r.live {
		t.Fatalf("the taker's lease was disturbed: %+v", r)
	}
}

func TestRenewalKeepsTheLeasePastManyTTLs(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := context.Background()
	m := backends[0].open(t, db.DSN)
	// Renewed again and again until the server's expiry is two TTLs past
	// the first one, every renewal seen on the server; the TTL leaves each
	// renewal 1.1 s to land after it is due.
	ttl := 2 * time.Second
	l := must[*lease.Lease](t)(m.Acquire(ctx, "long", ttl))
	first := readRow(t, conn, "long").expiresAt
	for expiry := first; !expiry.After(first.Add(2 * ttl)); {
		expiry = renewedPast(t, conn, l, expiry)
		if r := readRow(t, conn, "long"); !r.live || r.token != l.Token() {
			t.Fatalf("the row is not the live lease: %+v", r)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, conn, "long"); r.live {
		t.Fatal("released lease still live on the server")
	}
}
