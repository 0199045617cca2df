package sqlxhelpers_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/sqlxhelpers"
)

// BenchmarkUpdateVsHandWritten runs, interleaved on one *sqlx.Conn, the
// struct-driven Update, the guarded NamedExec and the hand-written
// equivalent of both (the same UPDATE text, its RowsAffected check and the
// version bump), on separate rows. It reports each one's time per write and
// the throughput ratios helper/hand-written (1.0 = as fast). The order
// rotates every iteration so that no variant always follows another.
func BenchmarkUpdateVsHandWritten(b *testing.B) {
	for _, drv := range []string{"pgx", "postgres"} {
		b.Run(drv, func(b *testing.B) {
			d := pgtest.New(b)
			d.Exec(accountsDDL)
			d.Exec(`INSERT INTO accounts VALUES (1, 'a', 0, 0), (2, 'b', 0, 0), (3, 'c', 0, 0)`)
			var db *sqlx.DB
			if drv == "pgx" {
				db = sqlx.NewDb(d.SQL(), "pgx")
			} else {
				var err error
				if db, err = sqlx.Open("postgres", d.DSN); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
			}
			ctx := context.Background()
			conn, err := db.Connx(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			h := newHelper(b, db).On(conn)

			const hand = `UPDATE "accounts" SET "owner" = $1, "balance" = $2, "version" = "version" + 1 WHERE "id" = $3 AND "version" = $4`
			const named = `UPDATE accounts SET owner = :owner, balance = :balance WHERE id = :id`
			helperRow := Account{ID: 1, Owner: "a"}
			namedRow := Account{ID: 2, Owner: "b"}
			handRow := Account{ID: 3, Owner: "c"}
			variants := []func() error{
				func() error {
					helperRow.Balance++
					return h.Update(ctx, "accounts", &helperRow)
				},
				func() error {
					namedRow.Balance++
					return h.NamedExec(ctx, named, &namedRow)
				},
				func() error {
					handRow.Balance++
					res, err := conn.ExecContext(ctx, hand, handRow.Owner, handRow.Balance, handRow.ID, int64(handRow.Version))
					if err != nil {
						return err
					}
					if n, err := res.RowsAffected(); err != nil || n != 1 {
						b.Fatalf("hand-written update: %d rows, %v", n, err)
					}
					handRow.Version++
					return nil
				},
			}
			// warm up: caches, prepared plans on the server
			for _, v := range variants {
				if err := v(); err != nil {
					b.Fatal(err)
				}
			}
			var spent [3]time.Duration
			var samples [3][]time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				for k := range variants {
					j := (i + k) % len(variants)
					start := time.Now()
					if err := variants[j](); err != nil {
						b.Fatal(err)
					}
					d := time.Since(start)
					spent[j] += d
					samples[j] = append(samples[j], d)
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(spent[0].Nanoseconds())/n, "struct-ns/write")
			b.ReportMetric(float64(spent[1].Nanoseconds())/n, "named-ns/write")
			b.ReportMetric(float64(spent[2].Nanoseconds())/n, "hand-ns/write")
			// Throughput ratios from the totals, and from the medians,
			// which a busy machine's stalls do not move.
			b.ReportMetric(float64(spent[2])/float64(spent[0]), "struct/hand-throughput")
			b.ReportMetric(float64(spent[2])/float64(spent[1]), "named/hand-throughput")
			med := func(xs []time.Duration) float64 {
				slices.Sort(xs)
				return float64(xs[len(xs)/2])
			}
			m0, m1, m2 := med(samples[0]), med(samples[1]), med(samples[2])
			b.ReportMetric(m2/m0, "struct/hand-median")
			b.ReportMetric(m2/m1, "named/hand-median")
		})
	}
}

const benchQuery = `UPDATE accounts AS a
   SET balance = a.balance + :balance, owner = upper(:owner) -- who paid
  FROM orders o
 WHERE o.account = a.id AND o.id = :id AND note <> 'it''s; /* not */ a :param'
RETURNING a.balance`

// BenchmarkRewrite: the rewriter itself (uncached: tokenize, parse, write),
// and Helper.Rewrite with the result cached per type and query text.
func BenchmarkRewrite(b *testing.B) {
	spec := sqlxhelpers.Spec{VersionColumn: "version", VersionParam: "version", BindType: sqlx.DOLLAR}
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(benchQuery)))
		for b.Loop() {
			if _, err := sqlxhelpers.Rewrite(benchQuery, spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		db, _ := mockDB(b, "postgres")
		h := newHelper(b, db)
		a := &Account{}
		if _, err := h.Rewrite(benchQuery, a); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetBytes(int64(len(benchQuery)))
		for b.Loop() {
			if _, err := h.Rewrite(benchQuery, a); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// nullExec answers every statement with "1 row affected" without a
// database: the client-side cost alone.
type nullExec struct{}

func (nullExec) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return driverResult(1), nil
}

type driverResult int64

func (r driverResult) LastInsertId() (int64, error) { return 0, nil }
func (r driverResult) RowsAffected() (int64, error) { return int64(r), nil }

// BenchmarkClientOverhead: what a struct-driven Update and a guarded
// NamedExec cost on the client, against the hand-written statement's
// argument boxing and RowsAffected check, with no database (nullExec).
// Added to a real round trip, this is the whole difference.
func BenchmarkClientOverhead(b *testing.B) {
	db, _ := mockDB(b, "postgres")
	h := newHelper(b, db).On(nullExec{})
	ctx := context.Background()
	const hand = `UPDATE "accounts" SET "owner" = $1, "balance" = $2, "version" = "version" + 1 WHERE "id" = $3 AND "version" = $4`
	b.Run("struct", func(b *testing.B) {
		a := Account{ID: 1, Owner: "a"}
		b.ReportAllocs()
		for b.Loop() {
			if err := h.Update(ctx, "accounts", &a); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("named", func(b *testing.B) {
		a := Account{ID: 1, Owner: "a"}
		b.ReportAllocs()
		for b.Loop() {
			if err := h.NamedExec(ctx, `UPDATE accounts SET owner = :owner, balance = :balance WHERE id = :id`, &a); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		a := Account{ID: 1, Owner: "a"}
		ex := benchExec
		b.ReportAllocs()
		for b.Loop() {
			res, err := ex.ExecContext(ctx, hand, a.Owner, a.Balance, a.ID, int64(a.Version))
			if err != nil {
				b.Fatal(err)
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				b.Fatal(n, err)
			}
			a.Version++
		}
	})
}

// benchExec is a package variable so that the hand-written variant's call
// stays a call through an interface, whose arguments escape to the heap,
// as they do with database/sql.
var benchExec sqlxhelpers.Execer = nullExec{}
