package lease_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// crash stops c's server as a crash would — SIGQUIT is PostgreSQL's
// immediate shutdown: no checkpoint, WAL replayed at the next start — and
// starts it again.
func crash(t testing.TB, c *pgtest.Cluster) {
	t.Helper()
	if err := syscall.Kill(c.PID(), syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil { // waits for the exit
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestTokensIncreaseAcrossDeletedRowsAndARecreatedTable(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := newDB(t)
	conn := admin(t, db)
	m := lease.New(db.Pool())
	last := int64(0)
	take := func(name string) {
		t.Helper()
		l := must[*lease.Lease](t)(m.TryAcquire(ctx, name, roomyTTL))
		if l.Token() <= last {
			t.Fatalf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	take("a")
	take("b")
	take("a")
	if _, err := conn.Exec(ctx, `DELETE FROM sqlock_leases`); err != nil {
		t.Fatal(err)
	}
	take("a")
	if _, err := conn.Exec(ctx, `DROP TABLE sqlock_leases`); err != nil {
		t.Fatal(err)
	}
	if err := lease.Migrate(ctx, db.SQL()); err != nil {
		t.Fatal(err)
	}
	if err := lease.Migrate(ctx, db.Pool()); err != nil { // idempotent
		t.Fatal(err)
	}
	take("a")
	take("b")
}

func TestTokensSurviveAServerCrash(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	c := pgtest.NewCluster(t, pgtest.Options{})
	db := c.NewDB(t)
	if err := lease.Migrate(ctx, db.SQL()); err != nil {
		t.Fatal(err)
	}
	m := lease.New(db.SQL())
	var last int64
	for range 3 {
		l := must[*lease.Lease](t)(m.TryAcquire(ctx, "crash", roomyTTL))
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// An immediate shutdown is a crash: recovery replays the WAL, in which
	// every nextval was logged ahead of the value it handed out.
	crash(t, c)
	var l *lease.Lease
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		l, err = m.TryAcquire(ctx, "crash", roomyTTL)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer l.Release(ctx)
	if l.Token() <= last {
		t.Fatalf("token %d after the crash, %d before", l.Token(), last)
	}
}

func TestDDLNamesTheConfiguredTable(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := newDB(t)
	db.Exec(`CREATE SCHEMA locks`)
	opt := lease.WithTable("locks.Leases")
	ddl := must[string](t)(lease.DDL(opt))
	db.Exec(ddl)
	m := lease.New(db.SQL(), opt)
	l := must[*lease.Lease](t)(m.TryAcquire(ctx, "x", roomyTTL))
	defer l.Release(ctx)
	var n int
	if err := admin(t, db).QueryRow(ctx, `SELECT count(*) FROM locks."Leases" WHERE token = $1`, l.Token()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("lease row in locks.\"Leases\": %d rows, %v", n, err)
	}
}

// lastDrawn is the token sequence's last value, read behind the package's
// back: how many tokens were drawn in all.
func lastDrawn(t testing.TB, conn *pgx.Conn) int64 {
	t.Helper()
	var v int64
	if err := conn.QueryRow(context.Background(), `SELECT last_value FROM sqlock_leases_token_seq`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// Re-acquiring a name whose row exists (released, or expired under its
// holder) draws one token, not one for the INSERT's proposed row and one
// more for its ON CONFLICT update.
func TestReacquiringANameDrawsOneTokenPerGrant(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := newDB(t)
	conn := admin(t, db)
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		m := bc.open(t, db.DSN)
		name := "again:" + bc.name
		first := must[*lease.Lease](t)(m.TryAcquire(ctx, name, roomyTTL))
		must[struct{}](t)(struct{}{}, first.Release(ctx))
		before, last := lastDrawn(t, conn), first.Token()
		const n = 10
		for i := range n {
			l := must[*lease.Lease](t)(m.TryAcquire(ctx, name, roomyTTL))
			if l.Token() != last+1 {
				t.Fatalf("re-acquisition %d: token %d after %d, want %d", i+1, l.Token(), last, last+1)
			}
			last = l.Token()
			if i%2 == 0 {
				must[struct{}](t)(struct{}{}, l.Release(ctx))
			} else {
				expireOnServer(t, conn, name) // taken over after expiry, not released
			}
		}
		if drawn := lastDrawn(t, conn) - before; drawn != n {
			t.Fatalf("%d tokens drawn for %d grants", drawn, n)
		}
	})
}

// Under contention the losers draw nothing either: 16 goroutines take one
// existing lease 15 times each; the sequence advances by exactly the number
// of grants, and each holder's token is above the one before it.
func TestContendedGrantsDrawOneTokenEach(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := newDB(t)
	conn := admin(t, db)
	m := lease.New(openPool(t, db.DSN), lease.WithTimeout(time.Minute))
	l := must[*lease.Lease](t)(m.TryAcquire(ctx, "crowd", roomyTTL))
	must[struct{}](t)(struct{}{}, l.Release(ctx))
	before := lastDrawn(t, conn)
	const workers, rounds = 16, 15
	var mu sync.Mutex
	var grants int64
	last := l.Token()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				l, err := m.Acquire(ctx, "crowd", roomyTTL)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock() // uncontended while the lease excludes the others
				if l.Token() <= last {
					t.Errorf("token %d after %d", l.Token(), last)
				}
				last = l.Token()
				grants++
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if drawn := lastDrawn(t, conn) - before; grants != workers*rounds || drawn != grants {
		t.Fatalf("%d grants of %d, %d tokens drawn", grants, workers*rounds, drawn)
	}
}

// An acquisition that saw a name's row, whose row is then deleted (a prune)
// before it can take it over, does not insert its placeholder: it is sent
// again and gets a token drawn for it, above the deleted row's. The delete
// is held open in a transaction until the acquisition waits for it.
func TestAnAcquisitionWhoseRowIsDeletedUnderItGetsAFreshToken(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := newDB(t)
	conn := admin(t, db)
	pruner := admin(t, db)
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		m := bc.open(t, db.DSN)
		name := "pruned:" + bc.name
		old := must[*lease.Lease](t)(m.TryAcquire(ctx, name, roomyTTL))
		must[struct{}](t)(struct{}{}, old.Release(ctx))
		tx := must[pgx.Tx](t)(pruner.Begin(ctx))
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `DELETE FROM sqlock_leases WHERE name = $1`, name); err != nil {
			t.Fatal(err)
		}
		type res struct {
			l   *lease.Lease
			err error
		}
		got := make(chan res, 1)
		go func() {
			l, err := m.TryAcquire(ctx, name, roomyTTL)
			got <- res{l, err}
		}()
		waitFor(t, "the acquisition to wait for the delete", func() bool {
			var n int
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE 'WITH cur AS%'`).Scan(&n)
			return err == nil && n == 1
		})
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("acquisition after its row was deleted: %v", r.err)
		}
		defer r.l.Release(ctx)
		if r.l.Token() <= old.Token() {
			t.Fatalf("token %d after the deleted row's %d", r.l.Token(), old.Token())
		}
		if row := readRow(t, conn, name); row.token != r.l.Token() || !row.live {
			t.Fatalf("row %+v, want the live lease with token %d", row, r.l.Token())
		}
	})
}
