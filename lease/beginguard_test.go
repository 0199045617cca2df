package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/txlock"
)

// sqlHandles are the database/sql handles BeginGuarded runs on: one whose
// BEGIN carries the guard (txlock.OpenDB), and two that send it after
// BEGIN (pgx's stdlib.OpenDB, lib/pq). Each has one connection, so that a
// connection a refused BEGIN left in a bad state is the next one used.
func sqlHandles(t testing.TB, db *pgtest.DB, w *pgtest.Wire) []struct {
	name string
	db   *sql.DB
} {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if w != nil {
		cfg.DialFunc = w.Dial
	}
	// No ping before reuse: it would be a round trip of its own.
	noPing := stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false })
	hs := []struct {
		name string
		db   *sql.DB
	}{
		{"txlock.OpenDB", txlock.OpenDB(*cfg, noPing)},
		{"stdlib.OpenDB", stdlib.OpenDB(*cfg, noPing)},
	}
	if w == nil {
		hs = append(hs, struct {
			name string
			db   *sql.DB
		}{"lib/pq", openSQL(t, "postgres", db.DSN)})
	}
	for _, h := range hs {
		h.db.SetMaxOpenConns(1)
		t.Cleanup(func() { h.db.Close() })
	}
	return hs
}

func TestBeginGuardedRefusesAfterTakeover(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE writes (token bigint, who text)`)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(db.Pool())
	for _, h := range sqlHandles(t, db, nil) {
		t.Run(h.name, func(t *testing.T) {
			name := "begin-guarded:" + h.name
			l := must[*lease.Lease](t)(m.Acquire(ctx, name, 5*time.Second))
			defer l.Release(ctx)
			tx := must[*sql.Tx](t)(l.BeginGuarded(ctx, h.db, nil))
			if _, err := tx.ExecContext(ctx, `INSERT INTO writes VALUES ($1, $2)`, l.Token(), h.name+" held"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}

			expireOnServer(t, conn, name)
			taker := must[*lease.Lease](t)(m.TryAcquire(ctx, name, 5*time.Second))
			defer taker.Release(ctx)
			tx, err := l.BeginGuarded(ctx, h.db, nil)
			if !errors.Is(err, lease.ErrLost) || tx != nil {
				t.Fatalf("BeginGuarded after takeover: %v, %v; want ErrLost and no transaction", tx, err)
			}
			select {
			case <-l.Lost():
			default:
				t.Fatal("a refused guarded BEGIN did not mark the lease lost")
			}
			// Refused locally now, nothing sent.
			if _, err := l.BeginGuarded(ctx, h.db, nil); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("BeginGuarded after loss: %v, want ErrLost", err)
			}
			// The refused BEGIN left its connection (the handle's only one)
			// outside any transaction: the next one works.
			next := must[*sql.Tx](t)(h.db.BeginTx(ctx, nil))
			if _, err := next.ExecContext(ctx, `INSERT INTO writes VALUES ($1, $2)`, 0, h.name+" next"); err != nil {
				t.Fatal(err)
			}
			if err := next.Commit(); err != nil {
				t.Fatal(err)
			}
			var held, stale, after int
			if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE who = $1), count(*) FILTER (WHERE who = $2),
				count(*) FILTER (WHERE who = $3) FROM writes`, h.name+" held", h.name+" stale", h.name+" next").Scan(&held, &stale, &after); err != nil {
				t.Fatal(err)
			}
			if held != 1 || stale != 0 || after != 1 {
				t.Fatalf("%d writes under the lease, %d stale, %d after; want 1, 0, 1", held, stale, after)
			}
		})
	}
}

func TestBeginGuardedHoldsOffTakeoverUntilTheTransactionEnds(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE writes (token bigint, who text)`)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(db.Pool())
	for _, h := range sqlHandles(t, db, nil) {
		t.Run(h.name, func(t *testing.T) {
			name := "begin-slow:" + h.name
			l := must[*lease.Lease](t)(m.Acquire(ctx, name, 5*time.Second))
			defer l.Release(ctx)
			tx := must[*sql.Tx](t)(l.BeginGuarded(ctx, h.db, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}))
			defer tx.Rollback()
			// The lease expires while the guarded transaction is open (a
			// holder paused mid-transaction); a taker must wait for it.
			expireOnServer(t, conn, name)
			type result struct {
				l   *lease.Lease
				err error
			}
			got := make(chan result, 1)
			go func() {
				l2, err := m.TryAcquire(ctx, name, 5*time.Second)
				got <- result{l2, err}
			}()
			waitFor(t, "the taker to wait for the guarded transaction", func() bool {
				var n int
				conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
					AND wait_event_type = 'Lock' AND query LIKE 'WITH cur AS%'`).Scan(&n)
				return n == 1
			})
			if _, err := tx.ExecContext(ctx, `INSERT INTO writes VALUES ($1, 'guarded')`, l.Token()); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-got:
				t.Fatalf("the takeover did not wait for the guarded transaction: %v %v", r.l, r.err)
			default:
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.l.Release(ctx)
			if r.l.Token() <= l.Token() {
				t.Fatalf("taker's token %d ≤ %d", r.l.Token(), l.Token())
			}
		})
	}
}

func TestBeginGuardedRefusesBadInputWithoutASend(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	var w pgtest.Wire
	h := sqlHandles(t, db, &w)[0].db
	ctx := context.Background()
	m := lease.New(db.Pool())
	l := must[*lease.Lease](t)(m.Acquire(ctx, "begin-bad-input", 5*time.Second))
	var nilLease *lease.Lease
	var nilDB *sql.DB
	var nilConn *sql.Conn
	w.Reset()
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"nil lease", func() error { _, err := nilLease.BeginGuarded(ctx, h, nil); return err }(), sqlock.ErrNilHandle},
		{"nil *sql.DB", func() error { _, err := l.BeginGuarded(ctx, nilDB, nil); return err }(), sqlock.ErrNilHandle},
		{"nil *sql.Conn", func() error { _, err := l.BeginGuarded(ctx, nilConn, nil); return err }(), sqlock.ErrNilHandle},
		{"nil handle", func() error { _, err := l.BeginGuarded(ctx, nil, nil); return err }(), sqlock.ErrNilHandle},
		{"released lease", func() error {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w.Reset() // the release's round trip went on the lease's own pool
			_, err := l.BeginGuarded(ctx, h, nil)
			return err
		}(), lease.ErrNotHeld},
	} {
		var e *lease.Error
		if !errors.Is(c.err, c.want) || !errors.As(c.err, &e) {
			t.Errorf("%s: %v, want a *lease.Error matching %v", c.name, c.err, c.want)
		}
	}
	if turns, _ := w.Counts(); turns != 0 {
		t.Fatalf("%d round trips for refused input", turns)
	}
}

// A guarded transaction costs the round trips of the same unguarded one:
// on database/sql through txlock.OpenDB (BEGIN carries the guard: 3 =
// BEGIN+guard, UPDATE, COMMIT), and on pgx with QueueGuard, in the batch
// that begins the transaction or in the one that carries the writes. On
// any other database/sql driver the guard is one more round trip (4).
func TestGuardedTransactionCostsTheRoundTripsOfAnUnguardedOne(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL); INSERT INTO t VALUES (1, 0)`)
	ctx := context.Background()
	var w pgtest.Wire
	hs := sqlHandles(t, db, &w)
	fold, plain := hs[0].db, hs[1].db
	pool := db.OpenPool(func(c *pgxpool.Config) {
		c.MaxConns, c.MinConns = 1, 0
		c.ConnConfig.DialFunc = w.Dial
		c.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	})
	m := lease.New(db.Pool()) // renewals go on another pool: not counted
	l := must[*lease.Lease](t)(m.Acquire(ctx, "begin-rt", time.Minute))
	defer l.Release(ctx)

	const update = "UPDATE t SET n = n + 1 WHERE id = $1"
	sqlTx := func(begin func() (*sql.Tx, error)) func() error {
		return func() error {
			tx, err := begin()
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, update, 1); err != nil {
				return err
			}
			return tx.Commit()
		}
	}
	unguarded := func(h *sql.DB) func() error {
		return sqlTx(func() (*sql.Tx, error) { return h.BeginTx(ctx, nil) })
	}
	guarded := func(h *sql.DB, opts *sql.TxOptions) func() error {
		return sqlTx(func() (*sql.Tx, error) { return l.BeginGuarded(ctx, h, opts) })
	}
	pgxUnguarded := func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, update, 1); return err })
	}
	pgxQueueGuard := func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			l.QueueGuard(b)
			b.Queue(update, 1)
			return tx.SendBatch(ctx, b).Close()
		})
	}
	pgxGuardedBegin := func() error {
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		l.QueueGuard(b)
		br := pool.SendBatch(ctx, b)
		tx := br.Tx()
		defer tx.Rollback(ctx)
		if err := br.Close(); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, update, 1); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	for _, tc := range []struct {
		name string
		tx   func() error
		want int
	}{
		{"OpenDB unguarded", unguarded(fold), 3},
		{"OpenDB BeginGuarded", guarded(fold, nil), 3},
		{"OpenDB BeginGuarded repeatable read", guarded(fold, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}), 3},
		{"stdlib unguarded", unguarded(plain), 3},
		{"stdlib BeginGuarded (guard after BEGIN)", guarded(plain, nil), 4},
		{"pgx unguarded", pgxUnguarded, 3},
		{"pgx QueueGuard with the UPDATE", pgxQueueGuard, 3},
		{"pgx QueueGuard with BEGIN", pgxGuardedBegin, 3},
	} {
		// Warm up: connections dialled, statements prepared and cached.
		for range 2 {
			if err := tc.tx(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		w.Reset()
		if err := tc.tx(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		turns, ready := w.Counts()
		t.Logf("%-40s %d round trips (%d ReadyForQuery)", tc.name, turns, ready)
		if turns != tc.want || ready != tc.want {
			t.Errorf("%s: %d round trips, %d ReadyForQuery; want %d", tc.name, turns, ready, tc.want)
		}
	}
	// A refused guard fails BEGIN's batch, and pgx evicts a failed batch's
	// statements from its cache; the next guarded transaction on the
	// connection must still cost 3, not spend round trips preparing
	// BEGIN and the guard again.
	taken := must[*lease.Lease](t)(m.Acquire(ctx, "begin-rt-taken", time.Minute))
	defer taken.Release(ctx)
	// Another owner in the row, as after a takeover: the server refuses the
	// guard (the holder's renewals, a minute apart, have not seen it yet).
	db.Exec(`UPDATE sqlock_leases SET owner = '00000000-0000-0000-0000-000000000001' WHERE name = 'begin-rt-taken'`)
	for range 2 {
		if _, err := taken.BeginGuarded(ctx, fold, nil); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("BeginGuarded of a lease taken over: %v, want ErrLost", err)
		}
		w.Reset()
		if err := guarded(fold, nil)(); err != nil {
			t.Fatal(err)
		}
		turns, ready := w.Counts()
		if turns != 3 || ready != 3 {
			t.Errorf("OpenDB BeginGuarded right after a refused one: %d round trips, %d ReadyForQuery; want 3", turns, ready)
		}
	}
}

// BenchmarkGuardedBegin: a transaction of one UPDATE, guarded against the
// same transaction unguarded, interleaved: on database/sql through
// txlock.OpenDB with BeginGuarded, and on pgx with QueueGuard in the batch
// that begins the transaction. The UPDATE is sent the same way in both.
// Over loopback, and with network latency added to every round trip (a
// sleep of 250 µs, which a busy machine stretches: the latency added is
// reported as lag-µs/roundtrip).
func BenchmarkGuardedBegin(b *testing.B) {
	for _, lag := range []time.Duration{0, 250 * time.Microsecond} {
		b.Run("lag-"+lag.String(), func(b *testing.B) { benchGuardedBegin(b, lag) })
	}
}

func benchGuardedBegin(b *testing.B, lag time.Duration) {
	db := newDB(b)
	db.Exec(`CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL)`)
	db.Exec(`INSERT INTO counter VALUES (1, 0)`)
	ctx := context.Background()
	m := lease.New(db.Pool()) // renewals on another pool: not counted
	l, err := m.Acquire(ctx, "bench-begin-guarded", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	var writes, lagged, lags atomic.Int64
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lagConn{Conn: countingConn{c, &writes}, lag: lag, total: &lagged, n: &lags}, nil
	}
	reportLag := func(b *testing.B) {
		if n := lags.Load(); n > 0 {
			b.ReportMetric(float64(lagged.Load())/float64(n)/1e3, "lag-µs/roundtrip")
		}
		lagged.Store(0)
		lags.Store(0)
	}
	const update = `UPDATE counter SET n = n + 1 WHERE id = 1`
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("database-sql-OpenDB", func(b *testing.B) {
		cfg, err := pgx.ParseConfig(db.DSN)
		must(err)
		cfg.DialFunc = dial
		h := txlock.OpenDB(*cfg, stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false }))
		defer h.Close()
		h.SetMaxOpenConns(1)
		run := func(begin func() (*sql.Tx, error)) func() {
			return func() {
				tx, err := begin()
				must(err)
				_, err = tx.ExecContext(ctx, update)
				must(err)
				must(tx.Commit())
			}
		}
		interleave(b, &writes,
			"guarded", run(func() (*sql.Tx, error) { return l.BeginGuarded(ctx, h, nil) }),
			"plain", run(func() (*sql.Tx, error) { return h.BeginTx(ctx, nil) }))
		reportLag(b)
	})
	b.Run("pgx-QueueGuard-with-BEGIN", func(b *testing.B) {
		cfg, err := pgxpool.ParseConfig(db.DSN)
		must(err)
		cfg.MaxConns, cfg.MinConns = 1, 0
		cfg.ConnConfig.DialFunc = dial
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		must(err)
		defer pool.Close()
		interleave(b, &writes, "guarded", func() {
			batch := &pgx.Batch{}
			batch.BeginTx(pgx.TxOptions{})
			l.QueueGuard(batch)
			br := pool.SendBatch(ctx, batch)
			tx := br.Tx()
			must(br.Close())
			_, err := tx.Exec(ctx, update)
			must(err)
			must(tx.Commit(ctx))
		}, "plain", func() {
			tx, err := pool.Begin(ctx)
			must(err)
			_, err = tx.Exec(ctx, update)
			must(err)
			must(tx.Commit(ctx))
		})
		reportLag(b)
	})
}

// lagConn adds lag to every round trip: the first read after a write
// waits that long first, as if the network were that much farther.
type lagConn struct {
	net.Conn
	lag      time.Duration
	total, n *atomic.Int64 // the lag added (ns) and the round trips it was added to
	wrote    atomic.Bool
}

func (c *lagConn) Write(b []byte) (int, error) {
	c.wrote.Store(true)
	return c.Conn.Write(b)
}

func (c *lagConn) Read(b []byte) (int, error) {
	if c.wrote.Swap(false) && c.lag > 0 {
		t := time.Now()
		time.Sleep(c.lag)
		c.total.Add(int64(time.Since(t)))
		c.n.Add(1)
	}
	return c.Conn.Read(b)
}
