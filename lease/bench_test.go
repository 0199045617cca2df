package lease_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// countingPool is a one-connection pgx pool that counts the writes its
// connection makes to the server: with pgx, one write per round trip.
func countingPool(tb testing.TB, db *pgtest.DB) (*pgxpool.Pool, *atomic.Int64) {
	var writes atomic.Int64
	pool := db.OpenPool(func(c *pgxpool.Config) {
		c.MaxConns, c.MinConns = 1, 1
		// No liveness ping when a connection idled for a second: it is
		// the pool's round trip, not the statement's being counted.
		c.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		dial := c.ConnConfig.DialFunc
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{conn, &writes}, nil
		}
	})
	return pool, &writes
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// interleave runs a and b alternately b.N times each, and reports each
// one's time per operation, round trips per operation, and b's time over
// a's: the two measured in the same run, under the same load.
func interleave(bm *testing.B, writes *atomic.Int64, aName string, a func(), bName string, b func()) {
	var ta, tb time.Duration
	var wa, wb int64
	a()
	b() // warm: prepared statements, connection
	bm.ResetTimer()
	for range bm.N {
		w0, t0 := writes.Load(), time.Now()
		a()
		w1, t1 := writes.Load(), time.Now()
		b()
		w2, t2 := writes.Load(), time.Now()
		ta, tb = ta+t1.Sub(t0), tb+t2.Sub(t1)
		wa, wb = wa+w1-w0, wb+w2-w1
	}
	n := float64(bm.N)
	bm.ReportMetric(float64(ta.Nanoseconds())/n, aName+"-ns/op")
	bm.ReportMetric(float64(tb.Nanoseconds())/n, bName+"-ns/op")
	bm.ReportMetric(float64(wa)/n, aName+"-roundtrips/op")
	bm.ReportMetric(float64(wb)/n, bName+"-roundtrips/op")
	bm.ReportMetric(float64(ta)/float64(tb), aName+"/"+bName)
}

// BenchmarkAcquireRelease: TryAcquire + Release against the same two
// statements sent by hand on the same pool, interleaved.
func BenchmarkAcquireRelease(b *testing.B) {
	db := newDB(b)
	pool, writes := countingPool(b, db)
	m := lease.New(pool)
	acquire, release := lease.Statements(m)
	ctx := context.Background()
	owner := "6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab"
	interleave(b, writes, "lease", func() {
		l, err := m.TryAcquire(ctx, "bench", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}, "hand", func() {
		var token, remaining, ticket, ahead, pred int64
		if err := pool.QueryRow(ctx, acquire, "bench-hand", owner, int64(10*time.Second/time.Microsecond), 0, "", nil).
			Scan(&token, &remaining, &ticket, &ahead, &pred); err != nil || token == 0 {
			b.Fatal(err, token)
		}
		var one int
		if err := pool.QueryRow(ctx, release, "bench-hand", owner).Scan(&one); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkGuardedWrite: a transaction of one UPDATE, guarded (Guard, and
// QueueGuard in a batch with the UPDATE) against the same transaction
// unguarded, interleaved.
func BenchmarkGuardedWrite(b *testing.B) {
	db := newDB(b)
	db.Exec(`CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL, fence bigint NOT NULL DEFAULT 0)`)
	db.Exec(`INSERT INTO counter VALUES (1, 0)`)
	pool, writes := countingPool(b, db)
	m := lease.New(db.Pool()) // renewals on another pool: not counted
	ctx := context.Background()
	l, err := m.Acquire(ctx, "bench-guard", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	const update = `UPDATE counter SET n = n + 1 WHERE id = 1`
	unguarded := func() {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, update)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Guard", func(b *testing.B) {
		interleave(b, writes, "guarded", func() {
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := l.Guard(ctx, tx); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, update)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}, "plain", unguarded)
	})
	// The UPDATE goes in a batch in both: a batch prepares it (and caches
	// the plan), where Exec without arguments sends it unprepared.
	batched := func(guard bool) func() {
		return func() {
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				batch := &pgx.Batch{}
				if guard {
					l.QueueGuard(batch)
				}
				batch.Queue(update)
				return tx.SendBatch(ctx, batch).Close()
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("QueueGuard", func(b *testing.B) {
		interleave(b, writes, "guarded", batched(true), "plain", batched(false))
	})
}

// BenchmarkWakeAfterRelease reports how long after a Release begins a
// waiter holds the lease: p50 and p99 over b.N hand-overs, listening
// directly and polling every 20 ms through PgBouncer in transaction mode.
func BenchmarkWakeAfterRelease(b *testing.B) {
	db := newDB(b)
	pgb := pgtest.StartPgBouncer(b, db, "transaction") + "&default_query_exec_mode=exec"
	for _, c := range []struct {
		name string
		open func() *lease.Manager
	}{
		{"listen", func() *lease.Manager { return lease.New(openPool(b, db.DSN)) }},
		{"poll-20ms-pgbouncer", func() *lease.Manager {
			return lease.New(openPool(b, pgb), lease.WithPolling(20*time.Millisecond))
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			lat := measureWake(b, c.open(), c.open(), max(b.N, 20))
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		})
	}
}

// BenchmarkGuardRowLock splits the guard's server cost: a one-UPDATE
// transaction, batched, with the guard statement ahead of the UPDATE —
// as shipped, and without its FOR KEY SHARE — each against the same
// transaction with SELECT 1 in the guard's place (what any one more
// statement costs), interleaved.
func BenchmarkGuardRowLock(b *testing.B) {
	db := newDB(b)
	db.Exec(`CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL)`)
	db.Exec(`INSERT INTO counter VALUES (1, 0)`)
	pool, writes := countingPool(b, db)
	m := lease.New(db.Pool()) // renewals on another pool: not counted
	ctx := context.Background()
	l, err := m.Acquire(ctx, "bench-row-lock", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	guard, owner := lease.GuardStatement(m, l)
	unlocked := strings.Replace(guard, " FOR KEY SHARE", "", 1)
	if unlocked == guard {
		b.Fatal("the guard statement has no FOR KEY SHARE")
	}
	run := func(stmt string, args ...any) func() {
		return func() {
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				batch := &pgx.Batch{}
				batch.Queue(stmt, args...)
				batch.Queue(`UPDATE counter SET n = n + 1 WHERE id = 1`)
				return tx.SendBatch(ctx, batch).Close()
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
	one := run(`SELECT 1`)
	b.Run("guard", func(b *testing.B) {
		interleave(b, writes, "guard", run(guard, "bench-row-lock", owner), "select1", one)
	})
	b.Run("no-row-lock", func(b *testing.B) {
		interleave(b, writes, "guard", run(unlocked, "bench-row-lock", owner), "select1", one)
	})
}

// BenchmarkContended32 reports the waits of 32 goroutines taking one
// lease name in turn, 1 ms holds (the figures of docs/lease.md's
// "Waiting"): p50, p99 and the longest, over max(b.N, 320) acquisitions.
// Directly (waiters listen) and through PgBouncer in transaction mode
// (waiters poll every 10 ms).
func BenchmarkContended32(b *testing.B) {
	db := newDB(b)
	pgb := pgtest.StartPgBouncer(b, db, "transaction") + "&default_query_exec_mode=exec"
	for _, c := range []struct {
		name string
		open func() *lease.Manager
	}{
		{"listen", func() *lease.Manager { return lease.New(openPool(b, db.DSN), lease.WithTimeout(10*time.Minute)) }},
		{"poll-10ms-pgbouncer", func() *lease.Manager {
			return lease.New(openPool(b, pgb), lease.WithTimeout(10*time.Minute), lease.WithPolling(10*time.Millisecond))
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			waits := contend(b, c.open(), 32, max(b.N/32, 10))
			b.ReportMetric(float64(percentile(waits, 0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(waits, 0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(waits[len(waits)-1].Microseconds())/1000, "max-ms")
		})
	}
}

// contend runs contenders goroutines that each take the lease "contended"
// rounds times, hold it 1 ms and release it, and returns every wait,
// sorted.
func contend(b testing.TB, m *lease.Manager, contenders, rounds int) []time.Duration {
	ctx := context.Background()
	var mu sync.Mutex
	var waits []time.Duration
	var wg sync.WaitGroup
	for range contenders {
		wg.Go(func() {
			for range rounds {
				start := time.Now()
				l, err := m.Acquire(ctx, "contended", roomyTTL)
				if err != nil {
					b.Error(err)
					return
				}
				w := time.Since(start)
				time.Sleep(time.Millisecond)
				if err := l.Release(ctx); err != nil {
					b.Error(err)
				}
				mu.Lock()
				waits = append(waits, w)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(waits) == 0 {
		b.Fatal("no acquisition")
	}
	slices.Sort(waits)
	return waits
}
