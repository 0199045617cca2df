package lease_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// measureWake holds a lease with holder, starts a waiter on it with
// waiter, waits until the waiter pauses after a failed try (listening, if
// it listens), releases, and returns how long after the Release call began
// the waiter had the lease; n times, sorted. waiter must not be used
// elsewhere meanwhile.
func measureWake(tb testing.TB, holder, waiter *lease.Manager, n int) []time.Duration {
	ctx := context.Background()
	name := fmt.Sprintf("wake:%p", waiter)
	paused := make(chan struct{}, 1)
	lease.OnPause(waiter, func() {
		select {
		case paused <- struct{}{}:
		default:
		}
	})
	defer lease.OnPause(waiter, nil)
	lat := make([]time.Duration, 0, n)
	for range n {
		h, err := holder.Acquire(ctx, name, 10*time.Second)
		if err != nil {
			tb.Fatal(err)
		}
		type res struct {
			l   *lease.Lease
			err error
			at  time.Time
		}
		got := make(chan res, 1)
		select {
		case <-paused:
		default:
		}
		go func() {
			l, err := waiter.Acquire(ctx, name, 10*time.Second)
			got <- res{l, err, time.Now()}
		}()
		<-paused
		start := time.Now()
		if err := h.Release(ctx); err != nil {
			tb.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			tb.Fatal(r.err)
		}
		lat = append(lat, r.at.Sub(start))
		if err := r.l.Release(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	slices.Sort(lat)
	return lat
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// countWakes holds a lease with holder, starts a waiter on it with waiter,
// waits until the waiter has begun at least minPauses pauses, releases, and
// checks that the waiter then gets the lease with a larger token; n times.
// It returns the mode of every pause (listening or polling) and, for each
// wait, whether the pause before the grant ended by a notification. waiter
// must not be used elsewhere meanwhile.
func countWakes(t *testing.T, holder, waiter *lease.Manager, n, minPauses int) (modes, notified []bool) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("wake:%p", waiter)
	paused := make(chan bool, 1000)
	woke := make(chan bool, 1000)
	lease.OnPauseMode(waiter, func(listening bool) { paused <- listening })
	lease.OnWake(waiter, func(n bool) { woke <- n })
	defer lease.OnPauseMode(waiter, nil)
	defer lease.OnWake(waiter, nil)
	for range n {
		h := must[*lease.Lease](t)(holder.Acquire(ctx, name, roomyTTL))
		type res struct {
			l   *lease.Lease
			err error
		}
		got := make(chan res, 1)
		go func() {
			l, err := waiter.Acquire(ctx, name, roomyTTL)
			got <- res{l, err}
		}()
		for range minPauses {
			modes = append(modes, <-paused)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("waiter after the release: %v", r.err)
		}
		// The waiter's hooks ran before its Acquire returned.
		for len(paused) > 0 {
			modes = append(modes, <-paused)
		}
		last := false
		for len(woke) > 0 {
			last = <-woke
		}
		notified = append(notified, last)
		if r.l.Token() <= h.Token() {
			t.Fatalf("waiter's token %d ≤ the holder's %d", r.l.Token(), h.Token())
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return modes, notified
}

// A listening waiter is woken by the release's notification: the pause
// before its grant ended by the notification, not by its timer (which,
// with the safety poll longer than the test and the holder's lease a
// minute long, would have waited a minute). It may pause more than once: a
// notification of the previous round's release can arrive late and wake
// it while the next holder holds. How fast the wake-up is, is
// BenchmarkWakeAfterRelease's to say.
func TestWaiterLearnsOfAReleaseWithoutPolling(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	for _, bc := range backends[:2] { // the two that LISTEN
		t.Run(bc.name, func(t *testing.T) {
			waiter := bc.open(t, db.DSN, lease.WithTimeout(10*time.Minute))
			lease.SetSafetyPoll(waiter, time.Hour)
			modes, notified := countWakes(t, bc.open(t, db.DSN), waiter, 20, 1)
			if slices.Contains(modes, false) {
				t.Fatalf("pause modes %v: a waiter polled", modes)
			}
			if slices.Contains(notified, false) {
				t.Fatalf("woken by a notification before each grant: %v", notified)
			}
		})
	}
	// The listener ends with the last waiter: no LISTEN connection stays.
	waitFor(t, "the listener to stop", func() bool {
		var k int
		conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %' AND state = 'idle'`).Scan(&k)
		return k == 0
	})
}

// With WithPolling behind PgBouncer in transaction mode, every pause of a
// waiter is a poll (several while the lease is held), and the poll after
// the release gets it.
func TestWaiterPollsBehindPgBouncerTransactionMode(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	dsn := pgtest.StartPgBouncer(t, db, "transaction")
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) {
			open := func() *lease.Manager {
				return bc.open(t, pgbouncerDSN(bc, dsn), lease.WithPolling(20*time.Millisecond), lease.WithTimeout(10*time.Minute))
			}
			modes, notified := countWakes(t, open(), open(), 10, 3)
			if slices.Contains(modes, true) || slices.Contains(notified, true) {
				t.Fatalf("pause modes %v, woken by a notification %v: a waiter listened", modes, notified)
			}
		})
	}
}

// pgbouncerDSN makes the drivers send each statement in one go, unnamed,
// as PgBouncer in transaction mode needs: pgx's exec mode, lib/pq's
// binary_parameters (without it lib/pq parses and binds in two round
// trips, which PgBouncer may send to two server connections).
func pgbouncerDSN(bc backendCase, dsn string) string {
	if bc.name == "sql-libpq" {
		return dsn + "&binary_parameters=yes"
	}
	return dsn + "&default_query_exec_mode=exec"
}
