package txlock_test

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/internal/tools/contention"
	"github.com/sqlock/sqlock/txlock"
)

const benchRows = 10000

// withParam adds a run-time parameter to a URL DSN.
func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// BenchmarkUncontended compares, interleaved in one run, one goroutine, a
// different row and key every time, synchronous_commit=off so that round
// trips are what is measured:
//
//   - unlocked: BEGIN; UPDATE one row; COMMIT;
//   - locked: the same through txlock (Do / DoPgx) with the options named;
//   - naive: the lock added by hand as a statement of its own, BEGIN;
//     SELECT pg_advisory_xact_lock($1); UPDATE; COMMIT — one round trip
//     more, what folding the lock into BEGIN saves;
//   - hand (pgx only): the lock folded into BEGIN by hand, BeginQuery
//     "BEGIN;SELECT pg_advisory_xact_lock(<key>)";
//   - floor (pgx only): BEGIN and the cheapest statement there is, a
//     prepared SELECT $1::int8, as one batch (pgx.Batch.BeginTx) — what any
//     statement sent with BEGIN costs, before it takes a lock;
//   - stmts (pgx only): the statements txlock sends (its lock statement,
//     lock_timeout included, in the BEGIN batch) sent by hand — locked vs
//     stmts is txlock's client cost, stmts vs floor the lock's server cost.
//
// It reports each one's µs and round trips per transaction (counted on
// the socket), tput-ratio = locked throughput / unlocked throughput
// (targets: pgx ≥ 0.97, database/sql through OpenDB ≥ 0.85 on loopback and
// ≥ 0.97 over a network), naive-, hand-, floor- and stmts-ratio the same
// way, and floor/locked-, stmts/locked- and floor/stmts-ratio (pgx; the
// loopback target: locked ≥ 0.95 of the floor), each ratio the median of
// blocks of ten rounds, so that txlock's own cost (locked vs hand, locked vs floor) and the cost
// of one more statement or round trip on the machine at hand can be told
// apart. make bench-report runs it over loopback and through a proxy that
// adds network latency (internal/tools/benchreport).
func BenchmarkUncontended(b *testing.B) {
	db := pgtest.New(b)
	db.Exec("CREATE TABLE t (id int PRIMARY KEY, n bigint NOT NULL)")
	db.Exec("INSERT INTO t SELECT g, 0 FROM generate_series(0, $1) g", benchRows-1)
	dsn := withParam(db.DSN, "synchronous_commit=off")
	ctx := context.Background()
	const update = "UPDATE t SET n = n + 1 WHERE id = $1"
	var wire pgtest.Wire

	poolCfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	poolCfg.MaxConns = 4
	poolCfg.ConnConfig.DialFunc = wire.Dial
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	connCfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	connCfg.DialFunc = wire.Dial
	plain := stdlib.OpenDB(*connCfg)
	defer plain.Close()
	fold := txlock.OpenDB(*connCfg)
	defer fold.Close()
	for _, h := range []*sql.DB{plain, fold} {
		h.SetMaxOpenConns(4)
		h.SetMaxIdleConns(4)
	}

	pgxTx := func(beginQuery func(id int) string, lock bool) func(int) error {
		return func(id int) error {
			var o pgx.TxOptions
			if beginQuery != nil {
				o.BeginQuery = beginQuery(id)
			}
			tx, err := pool.BeginTx(ctx, o)
			if err != nil {
				return err
			}
			if lock {
				if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(id)); err != nil {
					_ = tx.Rollback(ctx)
					return err
				}
			}
			if _, err := tx.Exec(ctx, update, id); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		}
	}
	pgxFloor := func(id int) error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		b.Queue("SELECT $1::int8", int64(id))
		br := conn.SendBatch(ctx, b)
		tx := br.Tx()
		if err := br.Close(); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, update, id); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}
	// pgxStmts sends, by hand, the statements txlock sends: BEGIN and its
	// lock statement (as internal/lockedtx builds it) in one batch.
	pgxStmts := func(lockSQL string, timeout bool) func(int) error {
		return func(id int) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			b := &pgx.Batch{}
			b.BeginTx(pgx.TxOptions{})
			if timeout {
				b.Queue(lockSQL, "5000ms", int64(id))
			} else {
				b.Queue(lockSQL, int64(id))
			}
			br := conn.SendBatch(ctx, b)
			tx := br.Tx()
			if err := br.Close(); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, update, id); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		}
	}
	pgxHand := pgxTx(func(id int) string { return "BEGIN;SELECT pg_advisory_xact_lock(" + strconv.Itoa(id) + ")" }, false)
	pgxLocked := func(opts ...txlock.Option) func(int) error {
		return func(id int) error {
			return txlock.DoPgx(ctx, pool, advisory.KeyInt(int64(id)), func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, update, id)
				return err
			}, opts...)
		}
	}
	sqlTx := func(h *sql.DB, lock bool) func(int) error {
		return func(id int) error {
			tx, err := h.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if lock {
				if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", int64(id)); err != nil {
					_ = tx.Rollback()
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, update, id); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}
	}
	sqlLocked := func(h *sql.DB, opts ...txlock.Option) func(int) error {
		return func(id int) error {
			return txlock.Do(ctx, h, advisory.KeyInt(int64(id)), func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, update, id)
				return err
			}, opts...)
		}
	}
	type arm struct {
		name string
		run  func(int) error
	}
	pgxArms := func(locked, stmts func(int) error) []arm {
		return []arm{{"unlocked", pgxTx(nil, false)}, {"locked", locked}, {"naive", pgxTx(nil, true)},
			{"hand", pgxHand}, {"floor", pgxFloor}, {"stmts", stmts}}
	}
	sqlArms := func(h *sql.DB) []arm {
		return []arm{{"unlocked", sqlTx(h, false)}, {"locked", sqlLocked(h)}, {"naive", sqlTx(h, true)}}
	}
	for _, bc := range []struct {
		name string
		arms []arm
	}{
		{"pgx", pgxArms(pgxLocked(), pgxStmts("SELECT pg_catalog.pg_advisory_xact_lock($2::int8) "+
			"FROM (SELECT pg_catalog.set_config('lock_timeout', $1::text, true)) s", true))},
		{"pgx/try-once", pgxArms(pgxLocked(txlock.TryOnce()), pgxStmts("SELECT pg_catalog.pg_try_advisory_xact_lock($1::int8)", false))},
		{"sql", sqlArms(plain)},
		{"sql+OpenDB", sqlArms(fold)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			arms := bc.arms
			// Warm every pooled connection and its statement cache.
			for i := range 16 {
				for _, arm := range arms {
					if err := arm.run(i); err != nil {
						b.Fatal(err)
					}
				}
			}
			spent := make([]time.Duration, len(arms))
			trips := make([]int64, len(arms))
			// Ratios are taken per block of blockRounds rounds (a round: one
			// transaction of every arm) and the median block reported, so
			// that a burst of load from outside, landing on a few
			// transactions of one arm, does not decide a ratio; the µs/tx
			// are the plain totals.
			const blockRounds = 10
			var blocks [][]time.Duration
			block := make([]time.Duration, len(arms))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range arms {
					// Rotate the order; each arm its own row.
					a := (i + j) % len(arms)
					n0, t0 := wire.Turns(), time.Now()
					if err := arms[a].run((i + a*benchRows/len(arms)) % benchRows); err != nil {
						b.Fatal(err)
					}
					d := time.Since(t0)
					spent[a] += d
					block[a] += d
					trips[a] += wire.Turns() - n0
				}
				if (i+1)%blockRounds == 0 || (i+1 == b.N && len(blocks) == 0) {
					blocks = append(blocks, block)
					block = make([]time.Duration, len(arms))
				}
			}
			b.StopTimer()
			ratio := func(num, den int) float64 {
				rs := make([]float64, len(blocks))
				for k, bl := range blocks {
					rs[k] = float64(bl[num]) / float64(bl[den])
				}
				slices.Sort(rs)
				return rs[len(rs)/2]
			}
			index := map[string]int{}
			for a, arm := range arms {
				index[arm.name] = a
				b.ReportMetric(float64(spent[a])/float64(time.Microsecond)/float64(b.N), arm.name+"-µs/tx")
				b.ReportMetric(float64(trips[a])/float64(b.N), arm.name+"-roundtrips/op")
				if a == 1 {
					b.ReportMetric(ratio(0, a), "tput-ratio")
				} else if a > 1 {
					b.ReportMetric(ratio(0, a), arm.name+"-ratio")
				}
			}
			if f, ok := index["floor"]; ok {
				b.ReportMetric(ratio(f, 1), "floor/locked-ratio")
				s := index["stmts"]
				b.ReportMetric(ratio(s, 1), "stmts/locked-ratio")
				b.ReportMetric(ratio(f, s), "floor/stmts-ratio")
			}
		})
	}
}

// BenchmarkHotKey: 32 workers increment one row by read-then-write (the
// contention driver, internal/tools/contention), under txlock (the lock folded
// into BEGIN, then a plain SELECT), under SELECT … FOR UPDATE (the
// database's native way) and under the hand-written lock (the lock as a
// statement of its own), rotating the mode order each iteration; one
// iteration is a fixed amount of work per mode (32 × 200 increments). It runs
// on a private cluster with production durability (fsync and
// synchronous_commit on, as in the baseline) and reports, over all
// iterations, each mode's throughput, latency p50/p99 (first attempt to
// success) and the locks' throughput ratio to FOR UPDATE. The driver checks
// the row against the number of successes on every run.
//
//	go test -run '^$' -bench HotKey -benchtime 5x ./txlock
func BenchmarkHotKey(b *testing.B) {
	cluster := pgtest.NewCluster(b, pgtest.Options{Settings: map[string]string{
		"fsync": "on", "full_page_writes": "on", "synchronous_commit": "on",
	}})
	db := cluster.NewDB(b)
	ctx := context.Background()
	modes := []struct {
		name string
		mode contention.Mode
	}{{"forupdate", contention.ForUpdate}, {"txlock", contention.TxLock}, {"hand", contention.HandLock}}
	const each = 200
	lat := make([][]time.Duration, len(modes))
	elapsed := make([]time.Duration, len(modes))
	for i := 0; i < b.N; i++ {
		for j := range modes {
			m := (i + j) % len(modes)
			r, err := contention.Run(ctx, db.DSN, modes[m].mode, workers, each)
			if err != nil {
				b.Fatal(err)
			}
			lat[m] = append(lat[m], r.Latencies...)
			elapsed[m] += r.Elapsed
		}
	}
	tput := make([]float64, len(modes))
	for m, mode := range modes {
		slices.Sort(lat[m])
		tput[m] = float64(len(lat[m])) / elapsed[m].Seconds()
		b.ReportMetric(tput[m], mode.name+"-tx/s")
		b.ReportMetric(ms(lat[m][len(lat[m])/2]), mode.name+"-p50-ms")
		b.ReportMetric(ms(lat[m][len(lat[m])*99/100]), mode.name+"-p99-ms")
	}
	b.ReportMetric(tput[1]/tput[0], "txlock/forupdate-tput")
	b.ReportMetric(tput[2]/tput[0], "hand/forupdate-tput")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkCancellableContext: what a caller's cancellable context costs
// an uncontended Do on txlock.OpenDB's handle, against
// context.Background. With a cancellable context the attempt pins its
// connection (sql.DB.Conn and one Raw), so that a cancellation can send
// its backend cancel requests instead of cutting the wait, and each step
// arms a context.AfterFunc; no round trip is added.
func BenchmarkCancellableContext(b *testing.B) {
	db := pgtest.New(b)
	db.Exec("CREATE TABLE t (id int PRIMARY KEY, n bigint NOT NULL)")
	db.Exec("INSERT INTO t SELECT g, 0 FROM generate_series(0, $1) g", benchRows-1)
	cfg, err := pgx.ParseConfig(withParam(db.DSN, "synchronous_commit=off"))
	if err != nil {
		b.Fatal(err)
	}
	h := txlock.OpenDB(*cfg)
	defer h.Close()
	h.SetMaxOpenConns(4)
	h.SetMaxIdleConns(4)
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"background", context.Background()}, {"cancellable", cancellable}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := i % benchRows
				i++
				err := txlock.Do(c.ctx, h, advisory.KeyInt(int64(id)), func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = $1", id)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
