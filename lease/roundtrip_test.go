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

// Renewals are counted on the server, exactly, by a trigger on the
// leases table, and the round trips on the pool's one socket: after three
// renewals the lease is released (which stops the renewals, then is one
// UPDATE itself), so nothing is in flight when the two counts are compared.
func TestRenewalIsOneRoundTrip(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE updates (n bigint NOT NULL);
		INSERT INTO updates VALUES (0);
		CREATE FUNCTION count_update() RETURNS trigger LANGUAGE plpgsql AS
			'BEGIN UPDATE updates SET n = n + 1; RETURN NULL; END';
		CREATE TRIGGER counted AFTER UPDATE ON sqlock_leases FOR EACH ROW EXECUTE FUNCTION count_update()`)
	pool, writes := countingPool(t, db)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(pool)
	updates := func() int64 {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT n FROM updates`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The TTL leaves each renewal 1.7 s to land after it is due: a lost
	// lease would stop the renewals counted.
	l := must[*lease.Lease](t)(m.Acquire(ctx, "renew-rt", 3*time.Second))
	start, before := writes.Load(), updates()
	waitFor(t, "three renewals", func() bool { return updates()-before >= 3 || l.Err() != nil })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	n, u := writes.Load()-start, updates()-before
	// u counts the renewals and the release. Two round trips more at most:
	// the first renewal and the release each prepare their statement once
	// (pgx's cache). Two round trips per statement would be twice as many.
	if u < 4 || n > u+2 {
		t.Fatalf("%d renewals and a release on the server, %d round trips", u-1, n)
	}
	t.Logf("%d renewals and a release, %d round trips", u-1, n)
}
