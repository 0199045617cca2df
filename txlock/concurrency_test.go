package txlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
)

const (
	workers    = 32
	increments = 300
)

// readThenWrite is a lost update waiting to happen: it reads n, yields (the
// window between the read and the write is also a full round trip), and
// writes back what it read plus one. There is no version column and no
// FOR UPDATE: only the advisory lock keeps two of these apart.
func readThenWrite(ctx context.Context, tx q, id int) error {
	n, err := tx.Int(ctx, "SELECT n FROM counter WHERE id = $1", id)
	if err != nil {
		return err
	}
	runtime.Gosched()
	return tx.Exec(ctx, "UPDATE counter SET n = $1 WHERE id = $2", n+1, id)
}

// The lock alone prevents lost updates: 32 goroutines × 300 read-then-write
// increments of one row, each in a transaction locked on the row's key,
// give exactly 9,600. The same increments without the lock lose updates,
// which shows the test can fail.
func TestLockPreventsLostUpdates(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec("CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL)")
	admin := db.Pool()
	ctx := context.Background()
	for i, be := range backends(t, db, bePgxPool, beSQL, beFold) {
		t.Run(be.name, func(t *testing.T) {
			id := i + 1
			db.Exec("INSERT INTO counter VALUES ($1, 0)", id)
			key := []advisory.Key{advisory.KeyPair(1, int32(id))} // "counter", row id
			run(t, workers, increments, func() error {
				return be.do(ctx, key, func(ctx context.Context, tx q) error { return readThenWrite(ctx, tx, id) })
			})
			if n := counterValue(t, admin, id); n != workers*increments {
				t.Fatalf("counter = %d, want %d", n, workers*increments)
			}
		})
	}
	t.Run("without the lock", func(t *testing.T) {
		db.Exec("INSERT INTO counter VALUES (100, 0)")
		pool := db.Pool()
		run(t, workers, increments, func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return readThenWrite(ctx, pgxQ{tx}, 100) })
		})
		n := counterValue(t, admin, 100)
		t.Logf("without the lock: counter = %d after %d increments (%d lost)", n, workers*increments, workers*increments-n)
		if n >= workers*increments {
			t.Fatalf("no update was lost without the lock (counter = %d): the test cannot tell the lock works", n)
		}
	})
}

func counterValue(t *testing.T, admin interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id int) int64 {
	t.Helper()
	var n int64
	if err := admin.QueryRow(context.Background(), "SELECT n FROM counter WHERE id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// run calls f n×each times from n goroutines and fails the test on the
// first error.
func run(t *testing.T, n, each int, f func() error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Random sets of keys out of 8, asked for in random order by 32 goroutines,
// never deadlock: locks are taken in canonical order. No retry is allowed,
// so a single 40P01 would fail a transaction, and none is reported to the
// observer either. Every row the transactions increment (read-then-write,
// in the caller's random order) ends exactly at its number of successful
// increments.
func TestManyKeysNoDeadlock(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec("CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL)")
	db.Exec("INSERT INTO counter SELECT g, 0 FROM generate_series(0, 7) g")
	admin := db.Pool()
	ctx := context.Background()
	const perWorker = 60 // a fixed amount of work: a few seconds under -race
	for _, be := range backends(t, db, bePgxPool, beSQL) {
		t.Run(be.name, func(t *testing.T) {
			db.Exec("UPDATE counter SET n = 0")
			var evs observetest.Recorder
			var want [8]atomic.Int64
			var seed atomic.Uint64
			run(t, workers, 1, func() error {
				rng := rand.New(rand.NewPCG(seed.Add(1), 42))
				for range perWorker {
					ids := rng.Perm(8)[:1+rng.IntN(4)]
					keys := make([]advisory.Key, len(ids))
					for i, id := range ids {
						keys[i] = advisory.KeyPair(2, int32(id))
					}
					err := be.do(ctx, keys, func(ctx context.Context, tx q) error {
						for _, id := range ids {
							if err := readThenWrite(ctx, tx, id); err != nil {
								return err
							}
						}
						return nil
					}, txlock.WithoutRetry(), txlock.WithTimeout(time.Hour), txlock.WithObserver(&evs))
					if err != nil {
						return fmt.Errorf("keys %v: %w (SQLSTATE %s)", ids, err, retry.SQLState(err))
					}
					for _, id := range ids {
						want[id].Add(1)
					}
				}
				return nil
			})
			if n := evs.Count(observe.LockAcquire, observe.Deadlock); n != 0 {
				t.Fatalf("%d deadlocks", n)
			}
			total := int64(0)
			for id := range 8 {
				got := counterValue(t, admin, id)
				if got != want[id].Load() {
					t.Errorf("row %d = %d, want %d", id, got, want[id].Load())
				}
				total += got
			}
			t.Logf("%d transactions, %d increments over 8 rows, 0 deadlocks", workers*perWorker, total)
		})
	}
	// The control: the same work locking the keys in the order each caller
	// asked for deadlocks (deadlock_timeout is lowered so that detection is
	// quick), so the test above can fail.
	t.Run("caller order", func(t *testing.T) {
		pool := db.Pool()
		var deadlocks atomic.Int64
		var seed atomic.Uint64
		run(t, workers, 1, func() error {
			rng := rand.New(rand.NewPCG(seed.Add(1), 42))
			for range perWorker {
				ids := rng.Perm(8)[:1+rng.IntN(4)]
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SET LOCAL deadlock_timeout = '10ms'"); err != nil {
						return err
					}
					for _, id := range ids {
						k := advisory.KeyPair(2, int32(id))
						if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock("+string(k.AppendArgs(nil))+")"); err != nil {
							return err
						}
					}
					return nil
				})
				switch {
				case retry.SQLState(err) == retry.CodeDeadlockDetected:
					deadlocks.Add(1)
				case err != nil:
					return err
				}
			}
			return nil
		})
		t.Logf("locking in caller order: %d deadlocks in %d transactions", deadlocks.Load(), workers*perWorker)
		if deadlocks.Load() == 0 {
			t.Fatal("no deadlock without canonical order: the test cannot tell the order matters")
		}
	})
}
