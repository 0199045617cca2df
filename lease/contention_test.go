package lease_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqlock/sqlock/lease"
)

// TestNoWaiterStarvesAmong32Contenders: 32 goroutines take one lease 10
// times each (1 ms holds). Waiters are not queued — every release wakes
// them all and one wins — so the test reports the wait distribution and
// asserts that every acquisition got in well within the wait bound.
func TestNoWaiterStarvesAmong32Contenders(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	pool := openPool(t, db.DSN)
	bound := 20 * time.Second
	m := lease.New(pool, lease.WithTimeout(bound))
	const contenders, rounds = 32, 10
	var mu sync.Mutex
	var waits []time.Duration
	var wg sync.WaitGroup
	for range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				start := time.Now()
				l, err := m.Acquire(ctx, "contended", 5*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				w := time.Since(start)
				time.Sleep(time.Millisecond) // the work
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
				mu.Lock()
				waits = append(waits, w)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(waits)
	if len(waits) != contenders*rounds {
		t.Fatalf("%d acquisitions of %d", len(waits), contenders*rounds)
	}
	p50, p99, worst := percentile(waits, 0.5), percentile(waits, 0.99), waits[len(waits)-1]
	t.Logf("%d contenders × %d: wait p50 %v, p99 %v, max %v", contenders, rounds, p50, p99, worst)
	if worst > bound/2 {
		t.Fatalf("a waiter waited %v, half the wait bound", worst)
	}
}
