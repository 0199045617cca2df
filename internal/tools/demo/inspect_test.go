package demo

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/inspect"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// While the payment scenario's session-lock strategy runs (3 replica
// processes, one goroutine per replica on each order), what `sqlock locks`
// reads — inspect.Take — shows the orders' locks by name (recorded by the
// replicas' Lockers, made with advisory.WithKeyNames): a holder, a waiter
// with its wait time, and the chain from the waiter to the holder's pid.
// The names of the txlock strategies' keys, which no Locker records, are
// recorded by the demo itself (nameKeys). The snapshots are taken as fast as the server answers for as long as
// the scenario runs (its own progress is the deadline); a run that ends
// before one such moment is caught is run again, up to three times.
func TestDemoLocksShowNamedHoldersWaitersAndChains(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background()) // ends the replicas of a failed test
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sc := paymentScenario
	st := sc.strategy("session lock")
	sqlDB := db.OpenSQL()
	var snaps int
	for run := 1; run <= 3; run++ {
		done := make(chan error, 1)
		go func() {
			_, err := runOne(ctx, exe, db.DSN, sc, st)
			done <- err
		}()
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			default:
				s, err := inspect.Take(ctx, sqlDB)
				if err != nil {
					t.Fatal(err)
				}
				snaps++
				if waiter, holder, ok := namedChain(s); ok {
					t.Logf("run %d, snapshot %d: %q waits %v for pid %d, which holds it", run, snaps, waiter.Name, waiter.For, holder.Session.PID)
					if err := <-done; err != nil {
						t.Fatal(err)
					}
					checkNameKeys(t, db.DSN)
					return
				}
				continue
			}
			break
		}
		t.Logf("run %d ended after %d snapshots without a named waiter behind a named holder", run, snaps)
	}
	t.Fatal("no snapshot showed a named waiter blocked by a named holder")
}

// namedChain finds a waiter on a payment order's named key whose
// BlockedBy names the pid holding that key.
func namedChain(s *inspect.Snapshot) (waiter, holder inspect.Lock, ok bool) {
	for _, w := range s.Locks {
		if w.Granted || !strings.HasPrefix(w.Name, "payment:order-") || w.For <= 0 || len(w.BlockedBy) == 0 {
			continue
		}
		for _, h := range s.Locks {
			if h.Granted && h.Name == w.Name && h.Key.Compare(w.Key) == 0 && slices.Contains(w.BlockedBy, h.Session.PID) {
				return w, h, true
			}
		}
	}
	return waiter, holder, false
}

// checkNameKeys: nameKeys records the txlock strategies' keys.
func checkNameKeys(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	if err := nameKeys(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, k := range []advisory.Key{seatKey, productKey, paymentKey(paymentOrders)} {
		v, _ := k.Int64()
		var name string
		if err := conn.QueryRow(ctx, "SELECT name FROM sqlock_key_names WHERE key = $1", v).Scan(&name); err != nil || name != k.Name() {
			t.Errorf("name of %v: %q, %v", k, name, err)
		}
	}
}
