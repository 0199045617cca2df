package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/observe"
)

// A TTL that is valid input but shorter than 8 round trips of the network
// the Manager measured is refused with an error of its own — not ErrInvalid
// (whose "nothing was sent" is untrue: round trips were) nor
// ErrInvalidOption, but like every backend's bad TTL
// sqlock.ErrInvalidArgument — and the observer sees the refusal. The proxy delays
// every byte by 10 ms each way, so no round trip is shorter than 20 ms at
// any machine speed, and a 100 ms TTL is under 8 of them.
func TestTTLRefusedByMeasuredRoundTripsIsItsOwnErrorAndObserved(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := newDB(t)
	p := pgtest.StartSlowProxy(t, db.DSN, 10*time.Millisecond)
	var evs observetest.Recorder
	m := lease.New(openSQL(t, "pgx", p.DSN), lease.WithObserver(&evs))
	for range 4 { // the Manager judges a TTL by round trips once it measured four
		l := must[*lease.Lease](t)(m.TryAcquire(ctx, "far", roomyTTL))
		must[struct{}](t)(struct{}{}, l.Release(ctx))
	}
	evs.Reset()
	_, err := m.TryAcquire(ctx, "far", 100*time.Millisecond)
	var le *lease.Error
	switch {
	case !errors.Is(err, lease.ErrTTLTooShort) || !errors.As(err, &le):
		t.Fatalf("a 100 ms TTL over ≥ 20 ms round trips: %v, want a *lease.Error matching ErrTTLTooShort", err)
	case errors.Is(err, lease.ErrInvalid) || errors.Is(err, sqlock.ErrInvalidOption):
		t.Fatalf("a refusal by measured round trips reported as input refused unsent: %v", err)
	case !errors.Is(err, sqlock.ErrInvalidArgument):
		t.Fatalf("a TTL too short to renew: %v, want it to match sqlock.ErrInvalidArgument", err)
	}
	got := evs.Events()
	if len(got) != 1 || got[0].Kind != observe.LockAcquire || got[0].Outcome != observe.Failed ||
		!errors.Is(got[0].Err, lease.ErrTTLTooShort) || got[0].Name != "far" {
		t.Fatalf("observer saw %+v, want one failed acquisition carrying ErrTTLTooShort", got)
	}
	var live int
	if err := admin(t, db).QueryRow(ctx, `SELECT count(*) FROM sqlock_leases WHERE name = 'far' AND expires_at > clock_timestamp()`).Scan(&live); err != nil || live != 0 {
		t.Fatalf("refused, but %d live rows (%v)", live, err)
	}
}
