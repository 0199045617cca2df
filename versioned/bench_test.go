package versioned_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/versioned"
)

// The hand-written equivalent of what Update runs for Set("balance", …):
// the statement a careful database/sql user writes, with the RowsAffected
// check they must not forget.
const handUpdate = `UPDATE accounts SET balance = $1, version = version + 1 WHERE id = $2 AND version = $3`

func handWritten(ctx context.Context, conn *sql.Conn, balance, id, version int64) (int64, error) {
	res, err := conn.ExecContext(ctx, handUpdate, balance, id, version)
	if err != nil {
		return version, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return version, err
	}
	if n != 1 {
		return version, versioned.ErrStale
	}
	return version + 1, nil
}

func benchConn(b *testing.B) (context.Context, *sql.Conn) {
	b.Helper()
	pg := pgtest.New(b)
	pg.Exec(`CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL,
		version bigint NOT NULL DEFAULT 0);
		INSERT INTO accounts (id, owner, balance) VALUES (1, 'ann', 0)`)
	ctx := context.Background()
	conn, err := pg.SQL().Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return ctx, conn
}

// BenchmarkUpdate compares the versioned UPDATE helper with the
// hand-written statement on the same *sql.Conn against a real PostgreSQL.
// The "interleaved" case alternates the two in one loop (so drift in the
// server or machine hits both alike) and reports each one's ns/op and
// ratio = helper throughput / hand-written throughput (target ≥ 0.97).
func BenchmarkUpdate(b *testing.B) {
	accounts := versioned.MustTable("accounts")
	b.Run("helper", func(b *testing.B) {
		ctx, conn := benchConn(b)
		var v int64
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			var err error
			if v, err = versioned.Update(ctx, conn, accounts, int64(1), v, versioned.Set("balance", int64(i))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handwritten", func(b *testing.B) {
		ctx, conn := benchConn(b)
		var v int64
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			var err error
			if v, err = handWritten(ctx, conn, int64(i), 1, v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("interleaved", func(b *testing.B) {
		ctx, conn := benchConn(b)
		var v int64
		var helper, hand time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			var err error
			for k := 0; k < 2; k++ {
				start := time.Now()
				if (i+k)%2 == 0 {
					v, err = versioned.Update(ctx, conn, accounts, int64(1), v, versioned.Set("balance", int64(i)))
					helper += time.Since(start)
				} else {
					v, err = handWritten(ctx, conn, int64(i), 1, v)
					hand += time.Since(start)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(helper.Nanoseconds())/float64(b.N), "helper-ns/op")
		b.ReportMetric(float64(hand.Nanoseconds())/float64(b.N), "hand-ns/op")
		b.ReportMetric(float64(hand)/float64(helper), "ratio")
	})
}

// nopExec answers every statement with one affected row, so the benchmark
// measures only what the helper adds on the client: building the SQL,
// checking the inputs, boxing the arguments.
type nopExec struct{}

// nopDB is a package variable so that the compiler cannot see through the
// interface and optimise the hand-written loop away.
var nopDB versioned.DB = nopExec{}

type oneRow struct{}

func (oneRow) LastInsertId() (int64, error) { return 0, nil }
func (oneRow) RowsAffected() (int64, error) { return 1, nil }

func (nopExec) ExecContext(context.Context, string, ...any) (sql.Result, error) { return oneRow{}, nil }

// QueryRowContext is never called: the benchmark's table does not probe.
func (nopExec) QueryRowContext(context.Context, string, ...any) *sql.Row { return nil }

func BenchmarkUpdateClientSide(b *testing.B) {
	accounts := versioned.MustTable("accounts")
	ctx := context.Background()
	db := nopDB
	b.Run("helper", func(b *testing.B) {
		b.ReportAllocs()
		var v int64
		for i := 0; i < b.N; i++ {
			v, _ = versioned.Update(ctx, db, accounts, int64(1), v, versioned.Set("balance", int64(i)))
		}
	})
	b.Run("handwritten", func(b *testing.B) {
		b.ReportAllocs()
		var v int64
		for i := 0; i < b.N; i++ {
			res, _ := db.ExecContext(ctx, handUpdate, int64(i), int64(1), v)
			if n, _ := res.RowsAffected(); n == 1 {
				v++
			}
		}
	})
	b.Run("delete", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_ = versioned.Delete(ctx, db, accounts, int64(1), int64(i))
		}
	})
}
