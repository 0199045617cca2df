package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/lease"
)

// stall blocks every write to the leases table — renewals included — on
// the server for d: an administrator's LOCK TABLE in a transaction of its
// own, the server-side form of a stalled network.
func stall(t testing.TB, conn *pgx.Conn, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	tx := must[pgx.Tx](t)(conn.Begin(ctx))
	if _, err := tx.Exec(ctx, `LOCK TABLE sqlock_leases IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d) // the fault's length
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRenewalRidesOutAStallShorterThanAThirdOfTheTTL(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(db.Pool())
	// The floor leaves the renewal after each stall room for a
	// scheduling delay of 100 ms or more on a busy machine (600 ms left
	// it 170 ms, which two CPU hogs and a parallel package overran).
	ttl := max(1200*time.Millisecond, 60*db.Latency())
	l := must[*lease.Lease](t)(m.Acquire(ctx, "stalled", ttl))
	defer l.Release(ctx)
	end := time.Now().Add(4 * ttl)
	stalls := 0
	for time.Now().Before(end) {
		stall(t, conn, ttl/3-ttl/20)
		stalls++
		select {
		case <-l.Lost():
			t.Fatalf("lost after %d stalls of %v (TTL %v): %v", stalls, ttl/3-ttl/20, ttl, l.Err())
		case <-time.After(ttl / 4):
		}
	}
	if r := readRow(t, conn, "stalled"); !r.live || r.token != l.Token() {
		t.Fatalf("the row is not the live lease: %+v", r)
	}
	t.Logf("TTL %v: %d stalls of %v, lease kept", ttl, stalls, ttl/3-ttl/20)
}

func TestLostFiresBeforeTheServerExpiresAStalledLease(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(db.Pool())
	ttl := max(400*time.Millisecond, 40*db.Latency())
	l := must[*lease.Lease](t)(m.Acquire(ctx, "stalled", ttl))
	defer l.Release(ctx)
	lostAt := make(chan time.Time, 1)
	go func() {
		<-l.Lost()
		lostAt <- time.Now()
	}()
	stall(t, conn, 2*ttl)
	at := <-lostAt
	expires := readRow(t, conn, "stalled").expiresAt
	t.Logf("TTL %v, stall %v: Lost at %s, server expiry %s: %v earlier",
		ttl, 2*ttl, at.Format("15:04:05.000"), expires.Format("15:04:05.000"), expires.Sub(at).Round(time.Millisecond))
	if !at.Before(expires) {
		t.Fatalf("Lost fired at %v, not before the server's expiry %v", at, expires)
	}
	if err := l.Err(); !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "no renewal confirmed in time") {
		t.Fatalf("Err() = %v", err)
	}
}

func TestMaxHoldEndsTheLeaseAfterItsCap(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	// A TTL long enough that a late renewal on a busy machine does not end
	// the lease before the cap does.
	ttl := max(time.Second, 20*db.Latency())
	hold := 2 * ttl
	m := lease.New(db.Pool(), lease.WithMaxHold(hold))
	start := time.Now()
	l := must[*lease.Lease](t)(m.Acquire(ctx, "capped", ttl))
	select {
	case <-l.Lost():
	case <-time.After(hold + 10*time.Second):
		t.Fatal("Lost did not fire after the maximum hold")
	}
	if held := time.Since(start); held < hold {
		t.Fatalf("lost after %v, before the cap %v: %v", held, hold, l.Err())
	}
	if err := l.Err(); !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "maximum hold") {
		t.Fatalf("Err() = %v", err)
	}
	if err := l.Release(ctx); err != nil && !errors.Is(err, lease.ErrNotHeld) {
		t.Fatal(err)
	}
}
