package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// TestOwnTimeoutIsNotTheCallersDeadline: behind sqlock.Acquirer, a wait
// that runs out at WithTimeout under a context without a deadline is
// ErrTimeout and does not match context.DeadlineExceeded; one that runs
// out at the caller's deadline matches both — on one server and on
// Redlock, as on advisory and lease.
func TestOwnTimeoutIsNotTheCallersDeadline(t *testing.T) {
	leakCheck(t)
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "single", 3: "redlock-3"}[n], func(t *testing.T) {
			cs := clients(t, redistest.NewN(t, n, redistest.Options{}))
			ctx := context.Background()
			held := must[sqlock.Lock](t)(acquirers(cs, time.Minute).Acquire(ctx, "busy"))
			defer held.Release(ctx)

			_, err := acquirers(cs, time.Minute, redislock.WithTimeout(20*time.Millisecond)).Acquire(ctx, "busy")
			if !errors.Is(err, sqlock.ErrTimeout) || !errors.Is(err, redislock.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("WithTimeout ran out, no deadline: %v — want ErrTimeout, not DeadlineExceeded", err)
			}
			dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			_, err = acquirers(cs, time.Minute, redislock.WithTimeout(time.Hour)).Acquire(dctx, "busy")
			if !errors.Is(err, sqlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the caller's deadline passed: %v — want ErrTimeout and DeadlineExceeded", err)
			}
		})
	}
}
