package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// liveTickets are the live tickets queued for name, in order (not the
// tombstones of waiters that left: negative tickets).
func liveTickets(t testing.TB, conn *pgx.Conn, name string) []int64 {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT ticket FROM sqlock_leases_waiters
		WHERE name = $1 AND ticket > 0 AND expires_at > clock_timestamp() ORDER BY ticket`, name)
	if err != nil {
		t.Fatal(err)
	}
	tickets, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return tickets
}

// awaitTickets returns name's live tickets once there are n, failing the
// test if its context ends first.
func awaitTickets(t testing.TB, ctx context.Context, conn *pgx.Conn, name string, n int) []int64 {
	t.Helper()
	for {
		if got := liveTickets(t, conn, name); len(got) == n {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d waiters never queued for %q: tickets %v", n, name, liveTickets(t, conn, name))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// TestWaitersAreServedInArrivalOrderAcrossProcesses: six OS processes (pgx
// and database/sql) queue one after another for a held lease, each
// starting once the one before holds a ticket; when the lease is released
// they get it in the order they arrived: their tickets increase with their
// arrival, and so do the tokens they were granted. Directly (waiters
// listen) and through PgBouncer in transaction mode (they poll).
func TestWaitersAreServedInArrivalOrderAcrossProcesses(t *testing.T) {
	for _, route := range []struct {
		name string
		dsn  func(t *testing.T, db *pgtest.DB) (dsn, poll string)
	}{
		{"direct", func(t *testing.T, db *pgtest.DB) (string, string) { return db.DSN, "" }},
		{"pgbouncer-transaction", func(t *testing.T, db *pgtest.DB) (string, string) {
			return pgtest.StartPgBouncer(t, db, "transaction") + "&default_query_exec_mode=exec", "10ms"
		}},
	} {
		t.Run(route.name, func(t *testing.T) {
			db := newDB(t)
			conn := admin(t, db)
			ctx := t.Context()
			dsn, poll := route.dsn(t, db)
			m := lease.New(openPool(t, db.DSN))
			holder, err := m.Acquire(ctx, "fifo", roomyTTL)
			if err != nil {
				t.Fatal(err)
			}
			const procs = 6
			var arrived []int64 // the tickets, in the order the processes arrived
			outs := make([]*bytes.Buffer, procs)
			cmds := make([]*exec.Cmd, procs)
			for i := range procs {
				outs[i] = &bytes.Buffer{}
				cmds[i] = child(t, "fifo", "LEASE_DSN="+dsn, "LEASE_POLL="+poll, "LEASE_NAME=fifo",
					"LEASE_BACKEND="+[]string{"sql", "pgx"}[i%2])
				cmds[i].Stdout = outs[i]
				if err := cmds[i].Start(); err != nil {
					t.Fatal(err)
				}
				tickets := awaitTickets(t, ctx, conn, "fifo", i+1)
				arrived = append(arrived, tickets[i])
			}
			if !slices.IsSorted(arrived) {
				t.Fatalf("tickets in arrival order: %v", arrived)
			}
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			byTicket := map[int64]int64{} // ticket → token
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Fatalf("process %d: %v: %s", i, err, outs[i])
				}
				var token, ticket int64
				out := outs[i].String()
				if _, err := fmt.Sscanf(out[strings.Index(out, "RESULT"):], "RESULT %d %d", &token, &ticket); err != nil {
					t.Fatalf("process %d said %q: %v", i, out, err)
				}
				if ticket != arrived[i] {
					t.Fatalf("process %d arrived with ticket %d, was granted with %d", i, arrived[i], ticket)
				}
				byTicket[ticket] = token
			}
			last := holder.Token()
			for i, ticket := range arrived {
				if tok := byTicket[ticket]; tok <= last {
					t.Fatalf("arrival %d (ticket %d) was granted token %d, not after token %d: grants %v in arrival order %v",
						i, ticket, tok, last, byTicket, arrived)
				}
				last = byTicket[ticket]
			}
			if left := liveTickets(t, conn, "fifo"); len(left) != 0 {
				t.Fatalf("tickets left in the queue: %v", left)
			}
		})
	}
}

// TestACancelledWaiterLeavesTheQueueAndTheNextIsServed: of three waiters
// queued in turn, the second's context is cancelled. Its Acquire returns the
// cancellation with its ticket already gone from the queue; on release, the
// first and then the third are served, in that order.
func TestACancelledWaiterLeavesTheQueueAndTheNextIsServed(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := t.Context()
	m := lease.New(openPool(t, db.DSN), lease.WithTimeout(time.Minute))
	holder, err := m.Acquire(ctx, "queue", roomyTTL)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lease.Lease
		err error
	}
	var order []string
	var mu sync.Mutex
	wait := func(name string, ctx context.Context) chan result {
		c := make(chan result, 1)
		go func() {
			l, err := m.Acquire(ctx, "queue", roomyTTL)
			if err == nil {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				err = l.Release(context.Background())
			}
			c <- result{l, err}
		}()
		return c
	}
	first := wait("first", ctx)
	awaitTickets(t, ctx, conn, "queue", 1)
	cctx, cancel := context.WithCancel(ctx)
	second := wait("second", cctx)
	awaitTickets(t, ctx, conn, "queue", 2)
	third := wait("third", ctx)
	tickets := awaitTickets(t, ctx, conn, "queue", 3)
	cancel()
	r := <-second
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the cancelled waiter: %v, want context.Canceled", r.err)
	}
	if left := liveTickets(t, conn, "queue"); !slices.Equal(left, []int64{tickets[0], tickets[2]}) {
		t.Fatalf("after the second waiter left, the queue is %v, want %v", left, []int64{tickets[0], tickets[2]})
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []chan result{first, third} {
		if r := <-c; r.err != nil {
			t.Fatal(r.err)
		}
	}
	if !slices.Equal(order, []string{"first", "third"}) {
		t.Fatalf("served %v, want first then third", order)
	}
}

// TestAReleaseWakesOnlyTheHeadOfTheQueue: eight listening waiters queue
// for a held lease (the safety poll set longer than the test, so every
// wake-up is a notification). Draining the queue, each grant costs at most
// two wake-ups — the release wakes the head, the head's grant the waiter
// behind it — never one per waiter, as when every release woke them all.
func TestAReleaseWakesOnlyTheHeadOfTheQueue(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := t.Context()
	m := lease.New(openPool(t, db.DSN), lease.WithTimeout(time.Hour))
	lease.SetSafetyPoll(m, time.Hour)
	var woken atomic.Int64
	lease.OnWake(m, func(notified bool) {
		if notified {
			woken.Add(1)
		}
	})
	holder, err := m.Acquire(ctx, "herd", roomyTTL)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 8
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for i := range waiters {
		wg.Go(func() {
			l, err := m.Acquire(ctx, "herd", roomyTTL)
			if err == nil {
				err = l.Release(ctx)
			}
			errs <- err
		})
		awaitTickets(t, ctx, conn, "herd", i+1)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := woken.Load(); n > 2*waiters {
		t.Fatalf("%d wake-ups for %d grants: more than the head and the one behind it each time", n, waiters)
	}
	t.Logf("%d wake-ups for %d grants", woken.Load(), waiters)
}
