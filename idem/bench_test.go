package idem_test

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// turns is w's round trips since its last reset.
func turns(w *pgtest.Wire) int {
	t, _ := w.Counts()
	return t
}

// interleave runs a and b alternately b.N times each on one connection
// and reports each one's time and round trips per operation, and a's
// throughput over b's: the two measured in the same run, under the same
// load.
func interleave(bm *testing.B, w *pgtest.Wire, aName string, a func(i int), bName string, b func(i int)) {
	var ta, tb time.Duration
	var wa, wb int
	a(-1)
	b(-1) // warm: prepared statements, connection
	a(-2)
	b(-2)
	bm.ResetTimer()
	for i := range bm.N {
		w0, t0 := turns(w), time.Now()
		a(i)
		w1, t1 := turns(w), time.Now()
		b(i)
		w2, t2 := turns(w), time.Now()
		ta, tb = ta+t1.Sub(t0), tb+t2.Sub(t1)
		wa, wb = wa+w1-w0, wb+w2-w1
	}
	n := float64(bm.N)
	bm.ReportMetric(float64(ta.Nanoseconds())/n, aName+"-ns/op")
	bm.ReportMetric(float64(tb.Nanoseconds())/n, bName+"-ns/op")
	bm.ReportMetric(float64(wa)/n, aName+"-roundtrips/op")
	bm.ReportMetric(float64(wb)/n, bName+"-roundtrips/op")
	bm.ReportMetric(float64(tb)/float64(ta), aName+"-throughput/"+bName)
}

// benchConn is one pooled pgx connection to a fresh database, dialled
// through w — and through a proxy adding rtt per round trip when rtt > 0.
func benchConn(b *testing.B, w *pgtest.Wire, rtt time.Duration) (*pgtest.DB, *pgxpool.Conn) {
	db := newDB(b)
	dsn := db.DSN
	if rtt > 0 {
		p := pgtest.StartProxy(b, dsn)
		if err := p.SetDelay(pgtest.BothWays, rtt/2, 0); err != nil {
			b.Fatal(err)
		}
		dsn = p.DSN
	}
	pool := openPool(b, dsn, w)
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Release)
	return db, conn
}

func insertEffect(ctx context.Context, tx pgx.Tx) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO effects (key) VALUES ('bench') RETURNING id`).Scan(&id)
	return id, err
}

// insertEffectSQL is insertEffect on database/sql.
func insertEffectSQL(ctx context.Context, tx *sql.Tx) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `INSERT INTO effects (key) VALUES ('bench') RETURNING id`).Scan(&id)
	return id, err
}

// BenchmarkIdempotentTx: a transaction that inserts one row (BEGIN,
// INSERT, COMMIT on pgx), inside idem.DoTx (BEGIN carries the claim,
// COMMIT the result) and without idem, interleaved on one connection: on
// loopback, and through a proxy that makes each round trip 0.5 ms.
func BenchmarkIdempotentTx(b *testing.B) {
	for _, rtt := range []time.Duration{0, 500 * time.Microsecond} {
		name := "loopback"
		if rtt > 0 {
			name = "rtt=" + rtt.String()
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			w := &pgtest.Wire{}
			_, conn := benchConn(b, w, rtt)
			interleave(b, w, "idem", func(i int) {
				_, err := idem.DoTx(ctx, conn, "bench", strconv.Itoa(i), []byte("fp"), func(ctx context.Context, tx pgx.Tx) (int64, error) {
					return insertEffect(ctx, tx)
				})
				if err != nil {
					b.Fatal(err)
				}
			}, "plain", func(int) {
				if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { _, err := insertEffect(ctx, tx); return err }); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkIdempotentTxSQL: the same on database/sql, a *sql.DB of
// txlock.OpenDB with one connection.
func BenchmarkIdempotentTxSQL(b *testing.B) {
	db := newDB(b)
	ctx := context.Background()
	w := &pgtest.Wire{}
	d := openFoldingDB(b, db.DSN, w)
	d.SetMaxOpenConns(1)
	interleave(b, w, "idem", func(i int) {
		if _, err := idem.DoTx(ctx, d, "bench", strconv.Itoa(i), []byte("fp"), insertEffectSQL); err != nil {
			b.Fatal(err)
		}
	}, "plain", func(int) {
		tx, err := d.BeginTx(ctx, nil)
		if err == nil {
			_, err = insertEffectSQL(ctx, tx)
		}
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkDoInCallersTx: the same transaction with idem.Do in the
// caller's transaction, which BEGIN has already left: the claim and the
// store are statements of their own (two more round trips).
func BenchmarkDoInCallersTx(b *testing.B) {
	ctx := context.Background()
	w := &pgtest.Wire{}
	_, conn := benchConn(b, w, 0)
	run := func(f func(tx pgx.Tx) error) {
		if err := pgx.BeginFunc(ctx, conn, f); err != nil {
			b.Fatal(err)
		}
	}
	interleave(b, w, "idem", func(i int) {
		run(func(tx pgx.Tx) error {
			_, err := idem.Do(ctx, tx, "bench", strconv.Itoa(i), []byte("fp"), func(ctx context.Context) (int64, error) { return insertEffect(ctx, tx) })
			return err
		})
	}, "plain", func(int) {
		run(func(tx pgx.Tx) error { _, err := insertEffect(ctx, tx); return err })
	})
}

// BenchmarkReplay: DoTx replaying a recorded key (answered ahead of BEGIN,
// one round trip) against a plain SELECT of the stored row (autocommit, one
// round trip), interleaved on one connection.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	w := &pgtest.Wire{}
	_, conn := benchConn(b, w, 0)
	replay := func(int) {
		_, err := idem.DoTx(ctx, conn, "bench", "k", []byte("fp"), func(context.Context, pgx.Tx) (receipt, error) {
			return receipt{Order: "o-1", Charge: 1000}, nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	replay(-1) // records the key
	interleave(b, w, "replay", replay, "select", func(int) {
		var r []byte
		if err := conn.QueryRow(ctx, `SELECT result FROM sqlock_idem WHERE scope = $1 AND key = $2`, "bench", "k").Scan(&r); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkSweepStatement: how long one sweeping statement runs on the
// server — the time its rows stay locked — for batches of MaxSweepBatch
// expired keys out of 10,000 per operation, beside 1,000 live ones. It
// reports the longest and the median statement's server time (from the
// statement's own clock_timestamp() − statement_timestamp()), and a
// SELECT 1's round trip measured in the same run as the machine's
// baseline: on a busy machine all three grow together.
func BenchmarkSweepStatement(b *testing.B) {
	db := newDB(b)
	ctx := context.Background()
	const perOp = 10_000
	var server []time.Duration
	var select1 time.Duration
	hook := idem.WithBatchHook(func(_ int64, took time.Duration) { server = append(server, took) })
	for b.Loop() {
		b.StopTimer()
		insertExpired(db, perOp, 1000)
		t0 := time.Now()
		db.Exec(`SELECT 1`)
		select1 += time.Since(t0)
		b.StartTimer()
		n, err := idem.Sweep(ctx, db.Pool(), hook)
		if err != nil || n != perOp {
			b.Fatalf("swept %d, %v; want %d", n, err, perOp)
		}
		b.StopTimer()
		db.Exec(`DELETE FROM sqlock_idem`)
		b.StartTimer()
	}
	slices.Sort(server)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(server[len(server)-1]), "longest-server-ms")
	b.ReportMetric(ms(server[len(server)/2]), "median-server-ms")
	b.ReportMetric(float64(len(server))/float64(b.N), "statements/op")
	b.ReportMetric(ms(select1)/float64(b.N), "select1-ms")
}

// BenchmarkAgainstClaimRowByHand: DoTx on a *sql.DB of txlock.OpenDB
// against idem's guarantee written carefully by hand on the same handle
// (issue 37's fair baseline): BEGIN, a claim row under UNIQUE (INSERT … ON
// CONFLICT DO NOTHING), the effect, the result stored, COMMIT. Fresh keys
// each time: the cost of a first request, which is what both do most.
func BenchmarkAgainstClaimRowByHand(b *testing.B) {
	db := newDB(b)
	db.Exec(`CREATE TABLE claims (key text PRIMARY KEY, result bigint)`)
	ctx := context.Background()
	w := &pgtest.Wire{}
	d := openFoldingDB(b, db.DSN, w)
	d.SetMaxOpenConns(1)
	interleave(b, w, "idem", func(i int) {
		if _, err := idem.DoTx(ctx, d, "bench", "idem-"+strconv.Itoa(i), nil, insertEffectSQL); err != nil {
			b.Fatal(err)
		}
	}, "byhand", func(i int) {
		key := "hand-" + strconv.Itoa(i)
		tx, err := d.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(ctx, `INSERT INTO claims (key) VALUES ($1) ON CONFLICT DO NOTHING`, key)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			b.Fatal("claimed twice")
		}
		id, err := insertEffectSQL(ctx, tx)
		if err == nil {
			_, err = tx.ExecContext(ctx, `UPDATE claims SET result = $2 WHERE key = $1`, key, id)
		}
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			b.Fatal(err)
		}
	})
}
