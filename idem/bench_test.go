package idem_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/pgtest"
)

// turns is w's round trips since its last reset, checked against its
// count of ReadyForQuery messages.
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

// BenchmarkIdempotentTx: a transaction that inserts one row (BEGIN,
// INSERT, COMMIT on pgx), with and without idem.Do around the insert,
// interleaved on one connection.
func BenchmarkIdempotentTx(b *testing.B) {
	db := newDB(b)
	ctx := context.Background()
	w := &pgtest.Wire{}
	pool := openPool(b, db.DSN, w)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	insert := func(tx pgx.Tx) (int64, error) {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO effects (key) VALUES ('bench') RETURNING id`).Scan(&id)
		return id, err
	}
	run := func(f func(tx pgx.Tx) error) {
		if err := pgx.BeginFunc(ctx, conn, f); err != nil {
			b.Fatal(err)
		}
	}
	interleave(b, w, "idem", func(i int) {
		run(func(tx pgx.Tx) error {
			_, err := idem.Do(ctx, tx, "bench", strconv.Itoa(i), []byte("fp"), func(context.Context) (int64, error) { return insert(tx) })
			return err
		})
	}, "plain", func(int) {
		run(func(tx pgx.Tx) error { _, err := insert(tx); return err })
	})
}

// BenchmarkReplay: replaying a recorded key (in a transaction, as a
// retried request does: BEGIN, claim, COMMIT) against a plain SELECT of
// the stored row in a transaction, interleaved on one connection.
func BenchmarkReplay(b *testing.B) {
	db := newDB(b)
	ctx := context.Background()
	w := &pgtest.Wire{}
	pool := openPool(b, db.DSN, w)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	run := func(f func(tx pgx.Tx) error) {
		if err := pgx.BeginFunc(ctx, conn, f); err != nil {
			b.Fatal(err)
		}
	}
	run(func(tx pgx.Tx) error {
		_, err := idem.Do(ctx, tx, "bench", "k", []byte("fp"), func(context.Context) (receipt, error) {
			return receipt{Order: "o-1", Charge: 1000}, nil
		})
		return err
	})
	interleave(b, w, "replay", func(int) {
		run(func(tx pgx.Tx) error {
			_, err := idem.Do(ctx, tx, "bench", "k", []byte("fp"), func(context.Context) (receipt, error) {
				b.Fatal("fn ran on a replay")
				return receipt{}, nil
			})
			return err
		})
	}, "select", func(int) {
		run(func(tx pgx.Tx) error {
			var r []byte
			return tx.QueryRow(ctx, `SELECT result FROM sqlock_idem WHERE scope = $1 AND key = $2`, "bench", "k").Scan(&r)
		})
	})
}
