package gormplugin_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// Account is versioned; PlainAccount is the same table shape without a
// version field, written by a GORM without the plugin: the baseline.
type Account struct {
	ID      uint
	Amount  int64
	Status  string
	Version int64 `lock:"version"`
}

type PlainAccount struct {
	ID     uint
	Amount int64
	Status string
}

// offline opens GORM's postgres dialector over a pgx stdlib connection
// that never dials (every dial fails and is counted), as a DryRun session
// without the default transaction: the CPU of building a statement, and
// nothing else. The returned counter must stay 0.
func offline(tb testing.TB, plugin bool) (*gorm.DB, *atomic.Int64) {
	tb.Helper()
	cfg, err := pgx.ParseConfig("postgres://u@127.0.0.1:1/db?sslmode=disable")
	if err != nil {
		tb.Fatal(err)
	}
	dials := &atomic.Int64{}
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("offline: no dialing")
	}
	sqlDB := stdlib.OpenDB(*cfg)
	tb.Cleanup(func() { sqlDB.Close() })
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{
		DisableAutomaticPing: true,
		Logger:               logger.Discard,
	})
	if err != nil {
		tb.Fatal(err)
	}
	if plugin {
		if err := db.Use(gormplugin.New()); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		if n := dials.Load(); n != 0 {
			tb.Errorf("the offline connection dialled %d times", n)
		}
	})
	return db.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true}), dials
}

// dryRunCalls are the four benchmarked calls.
func dryRunCalls(plain, versioned *gorm.DB) map[string]func() *gorm.DB {
	pa := &PlainAccount{ID: 1, Amount: 10, Status: "new"}
	va := &Account{ID: 1, Amount: 10, Status: "new", Version: 7}
	return map[string]func() *gorm.DB{
		"plain/map": func() *gorm.DB {
			return plain.Model(pa).Updates(map[string]any{"amount": 5, "status": "paid"})
		},
		"plain/struct": func() *gorm.DB {
			return plain.Model(pa).Updates(PlainAccount{Amount: 5, Status: "paid"})
		},
		"versioned/map": func() *gorm.DB {
			return versioned.Model(va).Updates(map[string]any{"amount": 5, "status": "paid"})
		},
		"versioned/struct": func() *gorm.DB {
			return versioned.Model(va).Updates(Account{Amount: 5, Status: "paid"})
		},
	}
}

// TestDryRunSQL pins the SQL of the benchmarked calls.
func TestDryRunSQL(t *testing.T) {
	plain, _ := offline(t, false)
	ver, _ := offline(t, true)
	calls := dryRunCalls(plain, ver)
	want := map[string]string{
		"plain/map":        `UPDATE "plain_accounts" SET "amount"=$1,"status"=$2 WHERE "id" = $3`,
		"plain/struct":     `UPDATE "plain_accounts" SET "amount"=$1,"status"=$2 WHERE "id" = $3`,
		"versioned/map":    `UPDATE "accounts" SET "amount"=$1,"status"=$2,"version"="version" + 1 WHERE "id" = $3 AND "accounts"."version" = $4`,
		"versioned/struct": `UPDATE "accounts" SET "amount"=$1,"status"=$2,"version"="version" + 1 WHERE "id" = $3 AND "accounts"."version" = $4`,
	}
	for name, call := range calls {
		tx := call()
		if tx.Error != nil {
			t.Fatalf("%s: %v", name, tx.Error)
		}
		if got := tx.Statement.SQL.String(); got != want[name] {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want[name])
		}
		if name[0] == 'v' && len(tx.Statement.Vars) == 4 && tx.Statement.Vars[3] != int64(7) {
			t.Errorf("%s: expected version bound as %v", name, tx.Statement.Vars[3])
		}
	}
}

// TestDryRunAllocations: the plugin adds at most 10 allocations to a
// versioned Updates, in both forms, over the same call on a plain model
// without the plugin. (Allocation counts, not time.)
func TestDryRunAllocations(t *testing.T) {
	plain, _ := offline(t, false)
	ver, _ := offline(t, true)
	calls := dryRunCalls(plain, ver)
	for _, form := range []string{"map", "struct"} {
		base := testing.AllocsPerRun(200, func() { calls["plain/"+form]() })
		with := testing.AllocsPerRun(200, func() { calls["versioned/"+form]() })
		t.Logf("%s: plain %.0f allocs, versioned %.0f (+%.0f)", form, base, with, with-base)
		if with-base > 10 {
			t.Errorf("%s: the plugin adds %.0f allocations per call, want <= 10", form, with-base)
		}
	}
}

func BenchmarkDryRun(b *testing.B) {
	plain, _ := offline(b, false)
	ver, _ := offline(b, true)
	calls := dryRunCalls(plain, ver)
	for _, name := range []string{"plain/map", "versioned/map", "plain/struct", "versioned/struct"} {
		call := calls[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if tx := call(); tx.Error != nil {
					b.Fatal(tx.Error)
				}
			}
		})
	}
}

// BenchmarkPostgres: the same calls end to end (GORM's default
// transaction: BEGIN, UPDATE, COMMIT), one row, each versioned update at
// the row's current version.
func BenchmarkPostgres(b *testing.B) {
	ver, plainDB, va, pa := postgresBench(b)
	run := func(name string, f func(i int) *gorm.DB) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if tx := f(i); tx.Error != nil || tx.RowsAffected != 1 {
					b.Fatalf("%v, %d rows", tx.Error, tx.RowsAffected)
				}
			}
		})
	}
	run("plain/map", func(i int) *gorm.DB {
		return plainDB.Model(pa).Updates(map[string]any{"amount": i, "status": "paid"})
	})
	run("versioned/map", func(i int) *gorm.DB {
		return ver.Model(va).Updates(map[string]any{"amount": i, "status": "paid"})
	})
	run("plain/struct", func(i int) *gorm.DB {
		return plainDB.Model(pa).Updates(PlainAccount{Amount: int64(i), Status: "paid"})
	})
	run("versioned/struct", func(i int) *gorm.DB {
		return ver.Model(va).Updates(Account{Amount: int64(i), Status: "paid"})
	})
	var got Account
	must(b, ver.First(&got, va.ID).Error)
	if got.Version != va.Version {
		b.Fatalf("database version %d, struct %d", got.Version, va.Version)
	}
}

// paired interleaves a and b in chunks, alternating which runs first, and
// reports the time ratio b/a: both see the same machine load, which makes
// the ratio far steadier than comparing two separate benchmarks on a busy
// machine. With a wire it also reports each side's round trips per call.
func paired(bm *testing.B, chunk int, wire *pgtest.Wire, a, b func(i int)) {
	bm.ReportAllocs()
	var ta, tb time.Duration
	var ra, rb int64
	count := func() int64 {
		if wire == nil {
			return 0
		}
		return wire.Turns()
	}
	i, round := 0, 0
	for bm.Loop() {
		round++
		runA := func() {
			n0, t0 := count(), time.Now()
			for range chunk {
				i++
				a(i)
			}
			ta += time.Since(t0)
			ra += count() - n0
		}
		runB := func() {
			n0, t0 := count(), time.Now()
			for range chunk {
				i++
				b(i)
			}
			tb += time.Since(t0)
			rb += count() - n0
		}
		if round%2 == 0 {
			runA()
			runB()
		} else {
			runB()
			runA()
		}
	}
	calls := float64(bm.N * chunk)
	bm.ReportMetric(float64(tb)/float64(ta), "ratio")
	bm.ReportMetric(float64(ta.Nanoseconds())/calls, "plain-ns/call")
	bm.ReportMetric(float64(tb.Nanoseconds())/calls, "versioned-ns/call")
	if wire != nil {
		bm.ReportMetric(float64(ra)/calls, "plain-roundtrips/op")
		bm.ReportMetric(float64(rb)/calls, "versioned-roundtrips/op")
	}
}

// BenchmarkDryRunPaired reports versioned/plain for both Updates forms,
// offline (see offline).
func BenchmarkDryRunPaired(b *testing.B) {
	plain, _ := offline(b, false)
	ver, _ := offline(b, true)
	calls := dryRunCalls(plain, ver)
	for _, form := range []string{"map", "struct"} {
		p, v := calls["plain/"+form], calls["versioned/"+form]
		b.Run(form, func(b *testing.B) {
			paired(b, 64, nil,
				func(int) {
					if tx := p(); tx.Error != nil {
						b.Fatal(tx.Error)
					}
				},
				func(int) {
					if tx := v(); tx.Error != nil {
						b.Fatal(tx.Error)
					}
				})
		})
	}
}

// BenchmarkPostgresPaired reports versioned/plain end to end, one plain
// and one versioned update interleaved, and each one's round trips.
func BenchmarkPostgresPaired(b *testing.B) {
	var wire pgtest.Wire
	ver, plainDB, va, pa := postgresBenchOn(b, &wire)
	check := func(tx *gorm.DB) {
		if tx.Error != nil || tx.RowsAffected != 1 {
			b.Fatalf("%v, %d rows", tx.Error, tx.RowsAffected)
		}
	}
	b.Run("map", func(b *testing.B) {
		paired(b, 4, &wire,
			func(i int) { check(plainDB.Model(pa).Updates(map[string]any{"amount": i, "status": "paid"})) },
			func(i int) { check(ver.Model(va).Updates(map[string]any{"amount": i, "status": "paid"})) })
	})
	b.Run("struct", func(b *testing.B) {
		paired(b, 4, &wire,
			func(i int) { check(plainDB.Model(pa).Updates(PlainAccount{Amount: int64(i), Status: "paid"})) },
			func(i int) { check(ver.Model(va).Updates(Account{Amount: int64(i), Status: "paid"})) })
	})
}

// postgresBench opens the versioned (plugin) and plain (no plugin) GORM
// handles on one PostgreSQL database, each with one row to update.
func postgresBench(b *testing.B) (ver, plainDB *gorm.DB, va *Account, pa *PlainAccount) {
	return postgresBenchOn(b, nil)
}

// postgresBenchOn is postgresBench with the connections dialled through
// wire, when not nil, which counts their round trips.
func postgresBenchOn(b *testing.B, wire *pgtest.Wire) (ver, plainDB *gorm.DB, va *Account, pa *PlainAccount) {
	d := pgtest.New(b)
	cfg, err := pgx.ParseConfig(d.DSN)
	if err != nil {
		b.Fatal(err)
	}
	if wire != nil {
		cfg.DialFunc = wire.Dial
	}
	ver = openWith(b, postgres.New(postgres.Config{Conn: stdlib.OpenDB(*cfg)}), nil)
	plainDB, err = gorm.Open(postgres.New(postgres.Config{Conn: sqlOf(b, ver)}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		b.Fatal(err)
	}
	must(b, ver.AutoMigrate(&Account{}, &PlainAccount{}))
	va = &Account{Amount: 1, Status: "new"}
	pa = &PlainAccount{Amount: 1, Status: "new"}
	must(b, ver.Create(va).Error)
	must(b, plainDB.Create(pa).Error)
	return ver, plainDB, va, pa
}
