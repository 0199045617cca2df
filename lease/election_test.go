package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// TestElectionLeaderNeverNamesADeposedLeader: once the leader's lease has
// expired on the server (its holder unaware), Leader reports nobody,
// though the leaders table still has the old identity; the next winner is
// read with its own term. A holder that took the name by Acquire, which
// announces no identity, is nobody too.
func TestElectionLeaderNeverNamesADeposedLeader(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	if err := lease.MigrateElections(ctx, db.Pool()); err != nil {
		t.Fatal(err)
	}
	m := lease.New(db.Pool())
	conn := admin(t, db)
	a := m.Candidate(t.Name(), "host-a", roomyTTL)
	la := must[*lease.Leadership](t)(a.Campaign(ctx))
	expireOnServer(t, conn, t.Name())
	if id, term, err := a.Leader(ctx); !errors.Is(err, lease.ErrNoLeader) || !errors.Is(err, sqlock.ErrNoLeader) {
		t.Fatalf("Leader after the leader's lease expired: %q, %d, %v; want ErrNoLeader", id, term, err)
	}
	lb := must[*lease.Leadership](t)(m.Candidate(t.Name(), "host-b", roomyTTL).Campaign(ctx))
	if id, term, err := a.Leader(ctx); err != nil || id != "host-b" || term != lb.Token() || term <= la.Token() {
		t.Fatalf("Leader: %q, %d, %v; want host-b at %d, above %d", id, term, err, lb.Token(), la.Token())
	}
	if err := la.Resign(ctx); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("the deposed leader's Resign: %v; want ErrNotHeld", err)
	}
	if id, _, err := a.Leader(ctx); err != nil || id != "host-b" {
		t.Fatalf("Leader after the deposed leader's Resign: %q, %v; want host-b", id, err)
	}
	must[struct{}](t)(struct{}{}, lb.Resign(ctx))
	plain := must[*lease.Lease](t)(m.Acquire(ctx, t.Name(), roomyTTL))
	if _, _, err := a.Leader(ctx); !errors.Is(err, lease.ErrNoLeader) {
		t.Fatalf("Leader while a plain lease holds the name: %v; want ErrNoLeader", err)
	}
	must[struct{}](t)(struct{}{}, plain.Release(ctx))
}

// TestElectionWithoutLeadersTableHoldsNothing: on a database migrated by
// Migrate alone, Campaign fails (the announcement has no table) and gives
// the lease back before it returns: the name is free at once.
func TestElectionWithoutLeadersTableHoldsNothing(t *testing.T) {
	ctx := t.Context()
	m := lease.New(newDB(t).Pool())
	if l, err := m.Candidate(t.Name(), "host-a", roomyTTL).Campaign(ctx); l != nil || err == nil {
		t.Fatalf("Campaign without the leaders table: %v, %v; want an error", l, err)
	}
	l, err := m.TryAcquire(ctx, t.Name(), roomyTTL)
	if err != nil {
		t.Fatalf("TryAcquire after the failed campaign: %v; want the name free", err)
	}
	must[struct{}](t)(struct{}{}, l.Release(ctx))
}

// TestElectionMigrate: concurrent MigrateElections calls succeed, a
// WithTable table gets its own leaders table (which ElectionDDL names),
// and a bad option is refused.
func TestElectionMigrate(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	table := lease.WithTable("election_migrate")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- lease.MigrateElections(ctx, db.Pool(), table) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent MigrateElections: %v", err)
		}
	}
	ddl := must[string](t)(lease.ElectionDDL(table))
	if !strings.Contains(ddl, `"election_migrate_leaders"`) {
		t.Fatalf("ElectionDDL names no election_migrate_leaders:\n%s", ddl)
	}
	m := lease.New(db.Pool(), table)
	l := must[*lease.Leadership](t)(m.Candidate(t.Name(), "host-a", roomyTTL).Campaign(ctx))
	must[struct{}](t)(struct{}{}, l.Resign(ctx))
	if _, err := lease.ElectionDDL(lease.WithTable("")); !errors.Is(err, sqlock.ErrInvalidOption) {
		t.Fatalf("ElectionDDL with an empty table: %v; want ErrInvalidOption", err)
	}
	if err := lease.MigrateElections(ctx, db.Pool(), lease.WithTable("")); !errors.Is(err, sqlock.ErrInvalidOption) {
		t.Fatalf("MigrateElections with an empty table: %v; want ErrInvalidOption", err)
	}
}

// TestElectionNilManager: a candidate of a nil Manager is refused with
// ErrNilHandle by every method.
func TestElectionNilManager(t *testing.T) {
	c := (*lease.Manager)(nil).Candidate("x", "host-a", roomyTTL)
	if _, err := c.Campaign(t.Context()); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Campaign: %v; want ErrNilHandle", err)
	}
	if _, _, err := c.Leader(t.Context()); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Leader: %v; want ErrNilHandle", err)
	}
	if _, err := c.Observe(t.Context()); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Observe: %v; want ErrNilHandle", err)
	}
	var l *lease.Leadership
	if err := l.Resign(t.Context()); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Resign of a nil Leadership: %v; want ErrNotHeld", err)
	}
}

// TestElectionObserveSeesAnExpiry: a leadership that ends by expiry on
// the server sends no notification; Observe's poll (here at the
// Manager's WithPolling interval) still reports nobody, then the next
// leader.
func TestElectionObserveSeesAnExpiry(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	if err := lease.MigrateElections(ctx, db.Pool()); err != nil {
		t.Fatal(err)
	}
	m := lease.New(db.Pool(), lease.WithPolling(10*time.Millisecond))
	changes := must[<-chan sqlock.Leader](t)(m.Candidate(t.Name(), "watcher", roomyTTL).Observe(ctx))
	expect := func(want sqlock.Leader) {
		t.Helper()
		for {
			select {
			case l := <-changes:
				if l == want {
					return
				}
			case <-ctx.Done():
				t.Fatalf("Observe never reported %+v", want)
			}
		}
	}
	expect(sqlock.Leader{})
	la := must[*lease.Leadership](t)(m.Candidate(t.Name(), "host-a", roomyTTL).Campaign(ctx))
	// Expired on the server, la's holder has not noticed: without this its
	// renewal outlives the test, retrying against a dropped database, and
	// a later test's leak check finds it.
	defer la.Resign(context.Background())
	expect(sqlock.Leader{Identity: "host-a", Term: la.Token()})
	expireOnServer(t, admin(t, db), t.Name())
	expect(sqlock.Leader{})
	lb := must[*lease.Leadership](t)(m.Candidate(t.Name(), "host-b", roomyTTL).Campaign(ctx))
	expect(sqlock.Leader{Identity: "host-b", Term: lb.Token()})
	must[struct{}](t)(struct{}{}, lb.Resign(ctx))
}

// TestElectionThroughPgBouncer: behind PgBouncer in transaction mode
// (where waiters poll), a campaign waits for the leader's resignation and
// wins with a greater term, each statement of the election being one
// statement and one round trip.
func TestElectionThroughPgBouncer(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	if err := lease.MigrateElections(ctx, db.Pool()); err != nil {
		t.Fatal(err)
	}
	dsn := pgtest.StartPgBouncer(t, db, "transaction") + "&default_query_exec_mode=exec"
	m := lease.New(openPool(t, dsn))
	la := must[*lease.Leadership](t)(m.Candidate(t.Name(), "host-a", roomyTTL).Campaign(ctx))
	b := m.Candidate(t.Name(), "host-b", roomyTTL)
	won := make(chan error, 1)
	var lb *lease.Leadership
	go func() {
		var err error
		lb, err = b.Campaign(ctx)
		won <- err
	}()
	if id, term, err := b.Leader(ctx); err != nil || id != "host-a" || term != la.Token() {
		t.Fatalf("Leader through PgBouncer: %q, %d, %v; want host-a, %d", id, term, err, la.Token())
	}
	must[struct{}](t)(struct{}{}, la.Resign(ctx))
	if err := <-won; err != nil {
		t.Fatalf("the waiting campaign never won through PgBouncer: %v", err)
	}
	if id, term, err := b.Leader(ctx); err != nil || id != "host-b" || term <= la.Token() {
		t.Fatalf("Leader after the resignation: %q, %d, %v; want host-b above %d", id, term, err, la.Token())
	}
	must[struct{}](t)(struct{}{}, lb.Resign(ctx))
}
