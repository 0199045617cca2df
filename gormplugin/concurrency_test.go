package gormplugin_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
)

type Counter struct {
	ID      uint
	N       int64
	Version int64 `lock:"version"`
}

type retryCounter struct{ retries, stale atomic.Int64 }

func (r *retryCounter) Observe(_ context.Context, e observe.Event) {
	switch e.Kind {
	case observe.Retry:
		r.retries.Add(1)
	case observe.Stale:
		r.stale.Add(1)
	}
}

// increment runs workers × each read-modify-write increments of one row,
// each First + Update inside retry.Do.
func increment(t *testing.T, db *gorm.DB, workers, each int, obs *retryCounter) {
	t.Helper()
	must(t, db.AutoMigrate(&Counter{}))
	c := Counter{}
	must(t, db.Create(&c).Error)
	policy := retry.New(
		retry.WithMaxAttempts(1_000_000), // bounded by the context below, not by a count
		retry.WithBackoff(retry.Exponential(2*time.Millisecond, 250*time.Millisecond)),
		retry.WithObserver(obs),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		wg       sync.WaitGroup
		failures atomic.Int64
		firstErr sync.Once
		errMsg   error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := policy.Do(ctx, func(ctx context.Context) error {
					var cur Counter // a fresh struct per attempt
					if err := db.WithContext(ctx).First(&cur, c.ID).Error; err != nil {
						return err
					}
					return db.WithContext(ctx).Model(&cur).Update("n", cur.N+1).Error
				})
				if err != nil {
					failures.Add(1)
					firstErr.Do(func() { errMsg = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d workers failed; first error: %v", failures.Load(), errMsg)
	}
	var got Counter
	must(t, db.First(&got, c.ID).Error)
	want := int64(workers * each)
	if got.N != want || got.Version != want+1 {
		t.Fatalf("n = %d, version = %d; want %d and %d (lost updates: %d)", got.N, got.Version, want, want+1, want-got.N)
	}
	t.Logf("%d increments by %d goroutines: n = %d, version = %d, retries = %d, stale conflicts = %d (%.2f retries per increment)",
		want, workers, got.N, got.Version, obs.retries.Load(), obs.stale.Load(), float64(obs.retries.Load())/float64(want))
}

// TestNoLostUpdatePostgres: 32 goroutines × 300 increments of one row
// through GORM, First + Update inside retry.Do: exactly 9,600.
func TestNoLostUpdatePostgres(t *testing.T) {
	obs := &retryCounter{}
	db := openPostgres(t, withObserver(obs))
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(32)
	sqlDB.SetMaxIdleConns(32)
	increment(t, db, 32, 300, obs)
	if obs.retries.Load() != obs.stale.Load() {
		t.Fatalf("retries %d != stale conflicts %d: something other than stale versions was retried", obs.retries.Load(), obs.stale.Load())
	}
}

// TestNoLostUpdateSQLite: the same on SQLite, smaller (SQLite serialises
// writers; busy_timeout makes them wait instead of failing).
func TestNoLostUpdateSQLite(t *testing.T) {
	obs := &retryCounter{}
	db := openSQLite(t, withObserver(obs))
	increment(t, db, 8, 50, obs)
}
