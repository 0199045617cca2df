package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/lease"
)

// TestOwnTimeoutIsNotTheCallersDeadline: behind sqlock.Acquirer, a wait
// that runs out at WithTimeout under a context without a deadline is
// ErrTimeout and does not match context.DeadlineExceeded; one that runs
// out at the caller's deadline matches both — as on advisory and
// redislock.
func TestOwnTimeoutIsNotTheCallersDeadline(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		held := must[sqlock.Lock](t)(bc.open(t, db.DSN).Acquirer(roomyTTL).Acquire(ctx, "busy-"+bc.name))
		defer held.Release(ctx)

		_, err := bc.open(t, db.DSN, lease.WithTimeout(20*time.Millisecond)).Acquirer(roomyTTL).Acquire(ctx, "busy-"+bc.name)
		if !errors.Is(err, sqlock.ErrTimeout) || !errors.Is(err, lease.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WithTimeout ran out, no deadline: %v — want ErrTimeout, not DeadlineExceeded", err)
		}
		dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err = bc.open(t, db.DSN, lease.WithTimeout(time.Hour)).Acquirer(roomyTTL).Acquire(dctx, "busy-"+bc.name)
		if !errors.Is(err, sqlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the caller's deadline passed: %v — want ErrTimeout and DeadlineExceeded", err)
		}
	})
}
