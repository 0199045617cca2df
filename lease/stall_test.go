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

// stallUntil blocks every write to the leases table — renewals included —
// on the server until until reports true: an administrator's LOCK TABLE in
// a transaction of its own on db, the server-side form of a stalled
// network. until must look on a connection of its own (a transaction
// reads pg_stat_activity once).
func stallUntil(t testing.TB, db *pgtest.DB, what string, until func() bool) {
	t.Helper()
	ctx := context.Background()
	tx := must[pgx.Tx](t)(admin(t, db).Begin(ctx))
	if _, err := tx.Exec(ctx, `LOCK TABLE sqlock_leases IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, what, until)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// renewalBlocked reports whether a renewal statement waits for a lock on
// the server.
func renewalBlocked(t testing.TB, conn *pgx.Conn) bool {
	var n int
	err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE %SET expires_at = clock_timestamp() + %'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A renewal that a server-side stall holds up lands when the stall ends,
// and the lease is kept. Each stall lasts until the renewal is seen waiting
// on the server, so its length follows the renewal timer, not a clock of
// the test's; the TTL leaves the renewal 1.7 s after its stall to land.
// (That renewals come every TTL/3 and are retried while the lease is
// trusted is internal/ttllock's timer logic, tested under synctest.)
func TestRenewalRidesOutAStallShorterThanAThirdOfTheTTL(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(db.Pool())
	ttl := 3 * time.Second
	l := must[*lease.Lease](t)(m.Acquire(ctx, "stalled", ttl))
	defer l.Release(ctx)
	for i := range 2 {
		before := readRow(t, conn, "stalled").expiresAt
		stallUntil(t, db, "a renewal to wait for the stall", func() bool { return renewalBlocked(t, conn) })
		waitFor(t, "the stalled renewal to land", func() bool {
			return readRow(t, conn, "stalled").expiresAt.After(before) || l.Err() != nil
		})
		if err := l.Err(); err != nil {
			t.Fatalf("lost after stall %d: %v", i+1, err)
		}
	}
	if r := readRow(t, conn, "stalled"); !r.live || r.token != l.Token() {
		t.Fatalf("the row is not the live lease: %+v", r)
	}
}

// A stall that outlasts the lease: by the time the server's clock has
// passed the lease's expiry, the holder already distrusts it (Lost is
// closed, Err says why) — Lost, Err and Context check the local deadline
// themselves, and that deadline comes a tenth of the TTL before the
// earliest expiry the server could have set. An order, not a duration.
func TestLostFiresBeforeTheServerExpiresAStalledLease(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(db.Pool())
	l := must[*lease.Lease](t)(m.Acquire(ctx, "stalled", 400*time.Millisecond))
	defer l.Release(ctx)
	stallUntil(t, db, "the server's expiry", func() bool { return !readRow(t, conn, "stalled").live })
	select {
	case <-l.Lost():
	default:
		t.Fatalf("the server's expiry passed, Lost not closed (deadline %v)", l.Deadline())
	}
	if err := l.Err(); !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "no renewal confirmed in time") {
		t.Fatalf("Err() = %v", err)
	}
}

func TestMaxHoldEndsTheLeaseAfterItsCap(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	// The cap comes long before the first renewal, so nothing but the cap
	// can end the lease, at any machine speed.
	ttl, hold := roomyTTL, 300*time.Millisecond
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
