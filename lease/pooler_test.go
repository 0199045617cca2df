package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// Without WithPolling, a Manager finds out by itself whether its LISTEN
// would be heard: directly and through PgBouncer in session mode its
// waiters listen for the release; through PgBouncer in transaction mode,
// where a LISTEN lands on a pooled server connection and no notification
// would reach the waiter, they poll from their first pause. Either way the
// waiter gets the lease after the release, with a larger token. Asserted by
// the mode of each pause, not by how long the wait took.
func TestWaitersPollByThemselvesBehindPgBouncerTransactionMode(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	routes := []struct {
		name    string
		dsn     string
		pooled  bool // through PgBouncer: pgbouncerDSN's driver settings apply
		listens bool
	}{
		{"direct", db.DSN, false, true},
		{"pgbouncer-session", pgtest.StartPgBouncer(t, db, "session"), true, true},
		{"pgbouncer-transaction", pgtest.StartPgBouncer(t, db, "transaction"), true, false},
	}
	ctx := context.Background()
	for _, route := range routes {
		for _, bc := range backends[:2] { // the two that can LISTEN
			t.Run(route.name+"/"+bc.name, func(t *testing.T) {
				dsn := route.dsn
				if route.pooled {
					dsn = pgbouncerDSN(bc, dsn)
				}
				holder := bc.open(t, dsn)
				waiter := bc.open(t, dsn, lease.WithTimeout(time.Minute))
				modes := make(chan bool, 100)
				lease.OnPauseMode(waiter, func(listening bool) {
					select {
					case modes <- listening:
					default:
					}
				})
				name := "pooled:" + route.name + ":" + bc.name
				h := must[*lease.Lease](t)(holder.Acquire(ctx, name, roomyTTL))
				type res struct {
					l   *lease.Lease
					err error
				}
				got := make(chan res, 1)
				go func() {
					l, err := waiter.Acquire(ctx, name, roomyTTL)
					got <- res{l, err}
				}()
				// A listening waiter pauses once (until the notification);
				// a polling one pauses again and again while the lease is held.
				pauses := 1
				if !route.listens {
					pauses = 3
				}
				for i := range pauses {
					if listening := <-modes; listening != route.listens {
						h.Release(ctx)
						<-got
						t.Fatalf("pause %d of the waiter: listening %v, want %v", i+1, listening, route.listens)
					}
				}
				if err := h.Release(ctx); err != nil {
					t.Fatal(err)
				}
				r := <-got
				if r.err != nil {
					t.Fatalf("waiter after the release: %v", r.err)
				}
				if r.l.Token() <= h.Token() {
					t.Fatalf("waiter's token %d ≤ the holder's %d", r.l.Token(), h.Token())
				}
				if err := r.l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
