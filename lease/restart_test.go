package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/pgtest"
	"github.com/sqlock/sqlock/lease"
)

func TestLeaseSurvivesAServerRestartWithinItsTTL(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	c := pgtest.NewCluster(t, pgtest.Options{})
	db := c.NewDB(t)
	if err := lease.Migrate(ctx, db.SQL()); err != nil {
		t.Fatal(err)
	}
	// The TTL must outlast a restart on a busy machine, whose length varies
	// with the load beside it: measure two first, and leave room for one
	// several times slower (a 4× margin over one restart once lost a lease
	// beside two CPU hogs and another test suite).
	var slowest time.Duration
	for range 2 {
		start := time.Now()
		if err := c.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(start))
	}
	ttl := max(5*time.Second, 8*slowest)
	t.Logf("slowest restart %v: TTL %v", slowest, ttl)
	for _, bc := range backends[:2] {
		t.Run(bc.name, func(t *testing.T) {
			m := bc.open(t, db.DSN)
			l := must[*lease.Lease](t)(m.Acquire(ctx, "restart:"+bc.name, ttl))
			defer l.Release(ctx)
			if err := c.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			// Renewals failed during the restart and are retried; two renewal
			// periods later the lease must have been renewed past its first
			// expiry, never lost.
			first := l.Deadline()
			waitFor(t, "a renewal after the restart", func() bool {
				select {
				case <-l.Lost():
					t.Fatalf("lost across the restart: %v", l.Err())
				default:
				}
				return l.Deadline().After(first)
			})
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release after the restart: %v", err)
			}
		})
	}
}
