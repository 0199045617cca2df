package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
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
	// The TTL is what the lease must outlast: the restart (a fast
	// shutdown and a start, a second or two even on a busy machine) and
	// the reconnect of a renewal. Its first renewal comes 5 s in.
	ttl := 15 * time.Second
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
