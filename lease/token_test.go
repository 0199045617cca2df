package lease_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/pgtest"
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
