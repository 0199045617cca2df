package lease_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock/lease"
)

// TestNoWaiterStarvesAmong32Contenders: 32 goroutines take one lease 10
// times each (1 ms holds), queued in arrival order. It logs the wait
// distribution (BenchmarkContended32 measures it) and asserts what holds at
// any speed: every acquisition got in (none ran out of its wait bound),
// one holder at a time, each token above the one before.
func TestNoWaiterStarvesAmong32Contenders(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	pool := openPool(t, db.DSN)
	m := lease.New(pool, lease.WithTimeout(10*time.Minute))
	const contenders, rounds = 32, 10
	var mu sync.Mutex
	var waits []time.Duration
	var inside atomic.Int32
	var last atomic.Int64
	var wg sync.WaitGroup
	for range contenders {
		wg.Go(func() {
			for range rounds {
				start := time.Now()
				l, err := m.Acquire(ctx, "contended", roomyTTL)
				if err != nil {
					t.Error(err)
					return
				}
				w := time.Since(start)
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				if prev := last.Swap(l.Token()); l.Token() <= prev {
					t.Errorf("token %d after %d", l.Token(), prev)
				}
				time.Sleep(time.Millisecond) // the work
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
				mu.Lock()
				waits = append(waits, w)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(waits)
	if len(waits) != contenders*rounds {
		t.Fatalf("%d acquisitions of %d", len(waits), contenders*rounds)
	}
	t.Logf("%d contenders × %d: wait p50 %v, p99 %v, max %v", contenders, rounds,
		percentile(waits, 0.5), percentile(waits, 0.99), waits[len(waits)-1])
}
