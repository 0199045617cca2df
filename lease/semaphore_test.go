package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// TestSemaphoreWithoutTableIsErrSchema: a semaphore on a database whose
// slots table was never made fails with ErrSchema (matching
// sqlock.ErrUnsupported), naming the cure, and creates nothing;
// MigrateSemaphores, run twice and beside Migrate, makes it work.
func TestSemaphoreWithoutTableIsErrSchema(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	sem := lease.New(db.Pool()).Semaphore(2, 10*time.Second)
	sl, err := sem.TryAcquire(ctx, "jobs")
	if sl != nil || !errors.Is(err, lease.ErrSchema) || !errors.Is(err, sqlock.ErrUnsupported) || !strings.Contains(err.Error(), "MigrateSemaphores") {
		t.Fatalf("TryAcquire without the table: %v, %v; want ErrSchema naming MigrateSemaphores", sl, err)
	}
	for range 2 {
		if err := lease.MigrateSemaphores(ctx, db.Pool()); err != nil {
			t.Fatal(err)
		}
	}
	if err := lease.Migrate(ctx, db.Pool()); err != nil {
		t.Fatal(err)
	}
	sl, err = sem.TryAcquire(ctx, "jobs")
	if err != nil {
		t.Fatalf("TryAcquire after MigrateSemaphores: %v", err)
	}
	if err := sl.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreSharesTheLeasesTokens: slots and leases of one table draw
// from one sequence, so their tokens are unique and in the order granted;
// a lease and a semaphore of the same name are separate things.
func TestSemaphoreSharesTheLeasesTokens(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	if err := lease.Migrate(ctx, db.Pool()); err != nil {
		t.Fatal(err)
	}
	if err := lease.MigrateSemaphores(ctx, db.Pool()); err != nil {
		t.Fatal(err)
	}
	m := lease.New(db.Pool())
	sem := m.Semaphore(3, 10*time.Second)
	var last int64
	for i := range 6 {
		var lk sqlock.Fenced
		var err error
		if i%2 == 0 {
			lk, err = m.TryAcquire(ctx, fmt.Sprintf("jobs#%d", i/2), 10*time.Second)
		} else {
			lk, err = sem.TryAcquire(ctx, "jobs")
		}
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		defer lk.Release(ctx)
		if lk.Token() <= last {
			t.Fatalf("grant %d: token %d after %d", i, lk.Token(), last)
		}
		last = lk.Token()
	}
}
