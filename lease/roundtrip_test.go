package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/lease"
)

func TestAcquireReleaseAndGuardAreOneRoundTripEach(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE writes (token bigint)`)
	pool, writes := countingPool(t, db)
	m := lease.New(pool)
	ctx := context.Background()
	count := func(f func() error) int64 {
		t.Helper()
		before := writes.Load()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		return writes.Load() - before
	}
	var l *lease.Lease
	acquire := func() (err error) { l, err = m.TryAcquire(ctx, "rt", 10*time.Second); return err }
	release := func() error { return l.Release(ctx) }
	tx := func(guard func(pgx.Tx) error) func() error {
		return func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := guard(tx); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO writes VALUES (1)`)
				return err
			})
		}
	}
	plain := tx(func(pgx.Tx) error { return nil })
	guarded := tx(func(tx pgx.Tx) error { return l.Guard(ctx, tx) })
	batched := func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			l.QueueGuard(b)
			b.Queue(`INSERT INTO writes VALUES (1)`)
			return tx.SendBatch(ctx, b).Close()
		})
	}
	// Warm the connection's statement cache (pgx prepares on first use).
	for _, f := range []func() error{acquire, plain, guarded, batched, release} {
		count(f)
	}
	if n := count(acquire); n != 1 {
		t.Errorf("TryAcquire: %d round trips, want 1", n)
	}
	p, g, b := count(plain), count(guarded), count(batched)
	if g != p+1 || b != p {
		t.Errorf("transaction: %d round trips plain, %d with Guard (want %d), %d with QueueGuard (want %d)", p, g, p+1, b, p)
	}
	if n := count(release); n != 1 {
		t.Errorf("Release: %d round trips, want 1", n)
	}
}

func TestRenewalIsOneRoundTrip(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	pool, writes := countingPool(t, db)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(pool)
	ttl := max(900*time.Millisecond, 30*db.Latency()) // a lost lease would stop the renewals counted
	l := must[*lease.Lease](t)(m.Acquire(ctx, "renew-rt", ttl))
	defer l.Release(ctx)
	// Renewals move expires_at; count them from the server's side while
	// counting the pool's writes (only the lease uses the pool).
	var renewals int
	last := readRow(t, conn, "renew-rt").expiresAt
	start := writes.Load()
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		if e := readRow(t, conn, "renew-rt").expiresAt; e.After(last) {
			renewals++
			last = e
		}
		time.Sleep(ttl / 20) // sampling faster than renewals (every ttl/3)
	}
	n := writes.Load() - start
	if e := readRow(t, conn, "renew-rt").expiresAt; e.After(last) {
		renewals++
	}
	// Two more at most: the first renewal prepares its statement (pgx's
	// cache), and one may be in flight, counted but not yet committed.
	// Two round trips per renewal would be twice as many.
	if renewals < 6 || n > int64(renewals)+2 {
		t.Fatalf("%d renewals seen, %d round trips", renewals, n)
	}
	t.Logf("%d renewals, %d round trips", renewals, n)
}
