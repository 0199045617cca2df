package advisory_test

import (
	"context"
	"testing"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
)

// TestWithObserverOptionsAddUp: several WithObserver options add up (a nil
// one adds nothing), as in every sqlock package; none replaces another.
func TestWithObserverOptionsAddUp(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	ctx := context.Background()
	var a, b observetest.Recorder
	l := advisory.NewPool(db.OpenPool(nil), advisory.WithObserver(&a), advisory.WithObserver(nil), advisory.WithObserver(&b))
	mustRelease(t, mustLock(t)(l.Lock(ctx, advisory.KeyInt(7))))
	for name, r := range map[string]*observetest.Recorder{"first": &a, "second": &b} {
		if r.Count(observe.LockAcquire, observe.Acquired) != 1 || r.Count(observe.LockRelease, observe.Released) != 1 {
			t.Errorf("%s observer saw %v, want one acquisition and one release", name, r.Events())
		}
	}
}
