package demo

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	MaybeWorker() // the coordinator re-executes this test binary as replicas
	pgtest.Main(m)
}

// requests is, per scenario, how many requests the replicas handle in all
// and how many of them a correct strategy completes (the rest find the
// work done). The task claim loops until the tasks run out, so only its
// completions are fixed.
var requests = map[string]struct{ total, ok int }{
	"payment":   {3 * paymentOrders, paymentOrders},
	clientRetry: {paymentOrders, paymentOrders},
	"seat":      {50, 1},
	"stock":     {200, initialStock},
	"claim":     {-1, claimTasks},
}

// repoStrategies are the strategies written the way the card tells users
// to: GORM with the plugin registered and sqlx with sqlxhelpers, each
// repository method wrapped with retry.Wrap.
var repoStrategies = []string{"gorm plugin+retry", "sqlx+retry"}

type result struct {
	stats     Stats
	anomalies int
}

var demoRun struct {
	once   sync.Once
	got    map[string]map[string]result // scenario, strategy
	paused map[string]pausedRow         // strategy
	err    error
}

// runDemo runs every scenario once per test binary, with real OS processes
// as replicas, against its own database; the tests read its results.
func runDemo(t *testing.T) map[string]map[string]result {
	t.Helper()
	demoRun.once.Do(func() {
		db := pgtest.New(t)
		got := map[string]map[string]result{}
		paused := map[string]pausedRow{}
		demoRun.err = Run(context.Background(), Config{DSN: db.DSN, Out: io.Discard, Progress: io.Discard,
			Rows: func(sc, st string, s Stats, anomalies int) {
				if got[sc] == nil {
					got[sc] = map[string]result{}
				}
				got[sc][st] = result{s, anomalies}
			},
			paused: func(r pausedRow) { paused[r.strategy.name] = r }})
		demoRun.got, demoRun.paused = got, paused
	})
	if demoRun.err != nil {
		t.Fatal(demoRun.err)
	}
	return demoRun.got
}

// TestDemo: in every scenario the naive strategy really shows its anomaly,
// and every mechanism shows none and completes exactly the work there is.
func TestDemo(t *testing.T) {
	got := runDemo(t)
	for _, sc := range scenarios {
		want := requests[sc.name]
		for _, st := range sc.strategies {
			r, ok := got[sc.name][st.name]
			if !ok {
				t.Errorf("%s/%s did not run", sc.name, st.name)
				continue
			}
			s := r.stats
			t.Logf("%s/%s: ok %d skipped %d anomalies %d conflicts %d retries %d errors %d in %.1fs",
				sc.name, st.name, s.Successes, s.Skipped, r.anomalies, s.Conflicts, s.Retries, s.Errors,
				float64(s.Elapsed)/1e9)
			if s.Errors != 0 {
				t.Errorf("%s/%s: %d errors, first: %s", sc.name, st.name, s.Errors, s.ErrSample)
			}
			if st.name == "naive" {
				if r.anomalies == 0 {
					t.Errorf("%s/naive showed no anomaly: the race window is not real", sc.name)
				}
				continue
			}
			if r.anomalies != 0 {
				t.Errorf("%s/%s: %d anomalies", sc.name, st.name, r.anomalies)
			}
			if s.Successes != want.ok {
				t.Errorf("%s/%s: %d completed, want %d", sc.name, st.name, s.Successes, want.ok)
			}
		}
	}
}

// TestPausedHolderLosesAnUpdateOnlyWithoutAFence: replica A, frozen by
// SIGSTOP for 2 × TTL between its read and its write, loses B's deposit
// every time when the lock can move to B and nothing checks A's late
// write — a lease written without fencing, an advisory lock whose session
// ended in the pause. With lease.Guard or a fence column the late write is
// refused, redone under a new lease, and both deposits count; B's token is
// greater than A's. An advisory lock whose session outlives the pause
// never moves: B is still waiting when A resumes (seen in pg_locks), and
// nothing is lost.
func TestPausedHolderLosesAnUpdateOnlyWithoutAFence(t *testing.T) {
	runDemo(t)
	want := map[string]struct {
		lost      int
		aLanded   bool
		takenOver bool
	}{
		"TTL lock, no fencing":    {1, true, true},
		"lease + Guard":           {0, false, true},
		"lease + fence column":    {0, false, true},
		"advisory lock":           {0, true, false},
		"advisory, session ended": {1, true, true},
	}
	for _, st := range pausedStrategies {
		r, ok := demoRun.paused[st.name]
		w, known := want[st.name]
		if !ok || !known {
			t.Errorf("%s: ran %v, expected %v", st.name, ok, known)
			continue
		}
		t.Logf("%s: B waited %v, A's write landed %v, balance %d, lost %d, A's release: %q",
			st.name, time.Duration(r.b.Wait), r.a.Landed, r.balance, r.lost, r.a.Release)
		if r.lost != w.lost || r.a.Landed != w.aLanded {
			t.Errorf("%s: %d lost updates, A's late write landed %v; want %d, %v", st.name, r.lost, r.a.Landed, w.lost, w.aLanded)
		}
		if r.a.Retried == r.a.Landed {
			t.Errorf("%s: A retried %v after its write landed %v", st.name, r.a.Retried, r.a.Landed)
		}
		if !w.takenOver && !r.bWaited {
			t.Errorf("%s: B was not waiting for the lock when A resumed", st.name)
		}
		if st.lease && r.b.Token <= r.a.Token {
			t.Errorf("%s: B's token %d not greater than A's %d", st.name, r.b.Token, r.a.Token)
		}
		if w.takenOver && r.a.Release == "" {
			t.Errorf("%s: A's Release after the takeover succeeded", st.name)
		}
	}
}

// TestClientRetryIsChargedOnceBehindIdem: every client's first response is
// really lost (each order is retried at least once, on another replica
// process), the naive API charges those orders again, and behind
// idem.Middleware each order is charged exactly once and every client's
// receipt names that one charge (a receipt naming another is an error).
func TestClientRetryIsChargedOnceBehindIdem(t *testing.T) {
	got := runDemo(t)[clientRetry]
	naive, withIdem := got["naive"], got[strategyIdem]
	if naive.anomalies == 0 {
		t.Errorf("naive: no double charge: the lost responses were not retried")
	}
	s := withIdem.stats
	if withIdem.anomalies != 0 || s.Errors != 0 || s.Successes != paymentOrders {
		t.Errorf("%s: %d double charges, %d errors (first: %s), %d receipts; want 0, 0, %d",
			strategyIdem, withIdem.anomalies, s.Errors, s.ErrSample, s.Successes, paymentOrders)
	}
	if s.Retries < paymentOrders {
		t.Errorf("%s: %d retries for %d orders: not every first response was lost", strategyIdem, s.Retries, paymentOrders)
	}
}

// TestDemoShowsTheCardsUsage: the payment and stock scenarios run the
// card's own usage — GORM with the plugin registered and sqlx with
// sqlxhelpers, on one struct tagged lock:"version", each repository method
// wrapped with retry.Wrap — as several OS processes, and it stops the
// races: no double charge, no overselling, every request answered exactly
// once (done, or found done), every stale write the plugin and the helper
// reported retried and nothing else. Under 200 buyers of one row the
// version check really catches lost races: nothing is oversold by
// construction, not by luck.
func TestDemoShowsTheCardsUsage(t *testing.T) {
	got := runDemo(t)
	for _, name := range []string{"payment", "stock"} {
		want := requests[name]
		for _, st := range repoStrategies {
			r, ok := got[name][st]
			if !ok {
				t.Errorf("scenario %s has no %q strategy", name, st)
				continue
			}
			s := r.stats
			if r.anomalies != 0 || s.Errors != 0 {
				t.Errorf("%s/%s: %d anomalies, %d errors (first: %s)", name, st, r.anomalies, s.Errors, s.ErrSample)
			}
			if s.Successes != want.ok || s.Successes+s.Skipped != want.total {
				t.Errorf("%s/%s: %d completed + %d found done, want %d + %d",
					name, st, s.Successes, s.Skipped, want.ok, want.total-want.ok)
			}
			if s.Conflicts != s.Retries {
				t.Errorf("%s/%s: %d stale writes reported but %d retries", name, st, s.Conflicts, s.Retries)
			}
			if name == "stock" && s.Conflicts == 0 {
				t.Errorf("stock/%s: no stale write was caught among 200 concurrent buyers", st)
			}
		}
	}
}

// TestModelsMigrateToTheDemoTables: the demo's GORM models, migrated by
// GORM, give the version column the scenarios create by hand (NOT NULL
// DEFAULT 1) and the same column names sqlx maps the db tags to.
func TestModelsMigrateToTheDemoTables(t *testing.T) {
	ctx := context.Background()
	migrated, handmade := pgtest.New(t), pgtest.New(t)
	orm, err := gorm.Open(postgres.Open(migrated.DSN), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := orm.AutoMigrate(&Order{}, &Product{}); err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := orm.DB(); err == nil {
		defer sqlDB.Close()
	}
	conn, err := pgx.Connect(ctx, handmade.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sc := range []*scenario{paymentScenario, stockScenario} {
		if _, err := conn.Exec(ctx, sc.setup("")); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"orders", "products"} {
		a, b := describe(t, migrated.DSN, table), describe(t, handmade.DSN, table)
		if !slices.Equal(a.columns, b.columns) {
			t.Errorf("%s: GORM migrates columns %v, the demo creates %v", table, a.columns, b.columns)
		}
		if a.version != "NO 1" || b.version != "NO 1" {
			t.Errorf("%s.version: GORM migrates %q, the demo creates %q (want NOT NULL DEFAULT 1: \"NO 1\")",
				table, a.version, b.version)
		}
	}
}

type tableShape struct {
	columns []string
	version string // is_nullable and column_default
}

func describe(t *testing.T, dsn, table string) tableShape {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT column_name, is_nullable || ' ' || coalesce(column_default, 'NULL')
		FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1 ORDER BY column_name`, table)
	if err != nil {
		t.Fatal(err)
	}
	var s tableShape
	for rows.Next() {
		var name, shape string
		if err := rows.Scan(&name, &shape); err != nil {
			t.Fatal(err)
		}
		s.columns = append(s.columns, name)
		if name == "version" {
			s.version = shape
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}
