package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// The tests here put a simulated network (pgtest.Proxy, 0.25 ms one way)
// between a Manager and the server, so every statement of the lease —
// acquire, each renewal, release — crosses it, and fault it there: a
// stall (nothing forwarded, connections open) or a cut (connections
// reset). The admin connection that reads the leases table goes direct.

// proxiedManager is a Manager whose pool dials only p.
func proxiedManager(t *testing.T, db *pgtest.DB) (*pgtest.Proxy, *lease.Manager) {
	t.Helper()
	p := pgtest.StartProxy(t, db.DSN)
	if err := p.SetDelay(pgtest.BothWays, 250*time.Microsecond, 50*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	return p, lease.New(openPool(t, p.DSN))
}

// renewedPast waits until the server has the lease renewed past expiry (or
// the holder lost it), and returns the new expiry.
func renewedPast(t *testing.T, conn *pgx.Conn, l *lease.Lease, expiry time.Time) time.Time {
	t.Helper()
	var r row
	waitFor(t, "a renewal to land", func() bool {
		r = readRow(t, conn, l.Name())
		return r.expiresAt.After(expiry) || l.Err() != nil
	})
	if err := l.Err(); err != nil {
		t.Fatalf("lost: %v", err)
	}
	return r.expiresAt
}

// A renewal sent into a stalled network goes out when the network comes
// back, and the lease is kept. Each stall starts right after a renewal
// landed and lasts until the next renewal is due on the Manager's side (a
// third of the TTL after the last one was sent, which the lease's Deadline
// tells), so a renewal waits in the stalled network each time; after the
// stall the TTL leaves it 1.7 s to land. (At which phase of the renewal
// timer a stall may fall is internal/ttllock's timer logic, under synctest.)
func TestRenewalThroughAProxyRidesOutStallsShorterThanAThirdOfTheTTL(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	p, m := proxiedManager(t, db)
	ctx := context.Background()
	ttl := 3 * time.Second
	l := must[*lease.Lease](t)(m.Acquire(ctx, "stalled", ttl))
	defer l.Release(ctx)
	expiry := readRow(t, conn, "stalled").expiresAt
	for range 3 {
		expiry = renewedPast(t, conn, l, expiry)
		// Deadline is the last confirmed renewal's send time + TTL − TTL/10.
		due := l.Deadline().Add(-ttl + ttl/10 + ttl/3)
		p.Stall()
		time.Sleep(time.Until(due) + 50*time.Millisecond) // the fault: past the renewal's send
		p.Resume()
	}
	renewedPast(t, conn, l, expiry)
	if r := readRow(t, conn, "stalled"); !r.live || r.token != l.Token() {
		t.Fatalf("the row is not the live lease: %+v", r)
	}
}

// The network stalls and stays stalled past the server's expiry: by then
// the holder distrusts its lease (Lost closed, Err says why: Lost, Err and
// Context check the local deadline themselves); only the server's expiry
// lets the next holder in, with a larger token; the renewal the stall held
// reaches the server late and is refused, and the lost holder's release
// changes nothing. Orders, not durations.
func TestLostFiresBeforeTheServerExpiresALeaseStalledInTheProxy(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	p, m := proxiedManager(t, db)
	ctx := context.Background()
	l := must[*lease.Lease](t)(m.Acquire(ctx, "stalled", 300*time.Millisecond))
	defer l.Release(ctx)
	p.Stall()
	defer p.Resume()
	// Direct: the stall is on the Manager's side only.
	waitFor(t, "the server's expiry", func() bool { return !readRow(t, conn, "stalled").live })
	select {
	case <-l.Lost():
	default:
		t.Fatalf("the server's expiry passed, Lost not closed (deadline %v)", l.Deadline())
	}
	if err := l.Err(); !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "no renewal confirmed in time") {
		t.Fatalf("Err() = %v", err)
	}
	next := must[*lease.Lease](t)(lease.New(db.Pool()).TryAcquire(ctx, "stalled", roomyTTL))
	defer next.Release(ctx)
	p.Resume()
	if next.Token() <= l.Token() {
		t.Fatalf("next holder's token %d ≤ %d", next.Token(), l.Token())
	}
	if err := l.Release(ctx); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("release of the lost lease: %v", err)
	}
	if r := readRow(t, conn, "stalled"); !r.live || r.token != next.Token() {
		t.Fatalf("the row is not the next holder's live lease: %+v", r)
	}
}

// Cut connections: after each renewal lands the proxy resets every
// connection, so the next renewal finds its pooled connection broken and
// is retried on a new one; the lease is kept. A Release sent right after a
// cut goes out on a connection the cut broke while it sat idle: the
// statement never reached the server, so it is sent again on a fresh
// connection, and the lease ends now, not by its TTL.
func TestRenewalThroughAProxyRidesOutCutConnections(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	p, m := proxiedManager(t, db)
	ctx := context.Background()
	l := must[*lease.Lease](t)(m.Acquire(ctx, "cut", 3*time.Second))
	defer l.Release(ctx)
	expiry := readRow(t, conn, "cut").expiresAt
	for range 3 {
		expiry = renewedPast(t, conn, l, expiry)
		p.Cut()
	}
	renewedPast(t, conn, l, expiry)
	p.Cut()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after the cut: %v", err)
	}
	if r := readRow(t, conn, "cut"); r.live {
		t.Fatalf("released, but the row is still live: %+v", r)
	}
}
