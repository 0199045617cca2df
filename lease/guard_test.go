package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/lease"
)

// txCase runs f in a transaction of one kind.
type txCase struct {
	name string
	run  func(t *testing.T, dsn string, f func(guard func(*lease.Lease) error, exec func(string, ...any) error) error) error
}

var txCases = []txCase{
	{"sql.Tx", func(t *testing.T, dsn string, f func(func(*lease.Lease) error, func(string, ...any) error) error) error {
		db := openSQL(t, "pgx", dsn)
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		err = f(func(l *lease.Lease) error { return l.Guard(ctx, tx) },
			func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err })
		if err != nil {
			return err
		}
		return tx.Commit()
	}},
	{"pgx.Tx", func(t *testing.T, dsn string, f func(func(*lease.Lease) error, func(string, ...any) error) error) error {
		ctx := context.Background()
		return pgx.BeginFunc(ctx, openPool(t, dsn), func(tx pgx.Tx) error {
			return f(func(l *lease.Lease) error { return l.Guard(ctx, tx) },
				func(q string, args ...any) error { _, err := tx.Exec(ctx, q, args...); return err })
		})
	}},
}

func TestGuardedWriteCommitsWhileHeldAndIsRefusedAfterTakeover(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE writes (token bigint, who text)`)
	conn := admin(t, db)
	ctx := context.Background()
	for _, tc := range txCases {
		t.Run(tc.name, func(t *testing.T) {
			m := lease.New(db.Pool())
			name := "guard:" + tc.name
			l := must[*lease.Lease](t)(m.Acquire(ctx, name, 5*time.Second))
			write := func(who string) error {
				return tc.run(t, db.DSN, func(guard func(*lease.Lease) error, exec func(string, ...any) error) error {
					if err := guard(l); err != nil {
						return err
					}
					return exec(`INSERT INTO writes VALUES ($1, $2)`, l.Token(), who)
				})
			}
			if err := write(tc.name + " held"); err != nil {
				t.Fatal(err)
			}
			expireOnServer(t, conn, name)
			taker := must[*lease.Lease](t)(m.TryAcquire(ctx, name, 5*time.Second))
			defer taker.Release(ctx)
			err := write(tc.name + " stale")
			if !errors.Is(err, lease.ErrLost) {
				t.Fatalf("guarded write after takeover: %v, want ErrLost", err)
			}
			select {
			case <-l.Lost():
			default:
				t.Fatal("a refused guard did not mark the lease lost")
			}
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM writes WHERE who = $1`, tc.name+" stale").Scan(&n); err != nil || n != 0 {
				t.Fatalf("the refused write landed: %d rows, %v", n, err)
			}
			l.Release(ctx)
		})
	}
}

func TestGuardHoldsOffTakeoverUntilTheTransactionEnds(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE writes (token bigint, who text)`)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(db.Pool())
	l := must[*lease.Lease](t)(m.Acquire(ctx, "slow", 5*time.Second))
	defer l.Release(ctx)
	h := openSQL(t, "pgx", db.DSN)
	tx := must[*sql.Tx](t)(h.BeginTx(ctx, nil))
	defer tx.Rollback()
	if err := l.Guard(ctx, tx); err != nil {
		t.Fatal(err)
	}
	// The lease expires while the guarded transaction is open (a holder
	// paused mid-transaction); a taker must wait for it to end.
	expireOnServer(t, conn, "slow")
	type result struct {
		l   *lease.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l2, err := m.TryAcquire(ctx, "slow", 5*time.Second)
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
}

func TestGuardDoesNotHoldOffRenewal(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(db.Pool())
	// The TTL leaves each renewal 1.7 s to land after it is due.
	l := must[*lease.Lease](t)(m.Acquire(ctx, "renew-under-guard", 3*time.Second))
	defer l.Release(ctx)
	h := openSQL(t, "pgx", db.DSN)
	tx := must[*sql.Tx](t)(h.BeginTx(ctx, nil))
	defer tx.Rollback()
	if err := l.Guard(ctx, tx); err != nil {
		t.Fatal(err)
	}
	// With the guard's row lock held, two renewals land.
	expiry := readRow(t, conn, "renew-under-guard").expiresAt
	for range 2 {
		expiry = renewedPast(t, conn, l, expiry)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 30 s waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGuardAbortsTheTransactionEvenIfItsErrorIsIgnored(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE writes (token bigint, who text)`)
	conn := admin(t, db)
	ctx := context.Background()
	m := lease.New(db.Pool())
	l := must[*lease.Lease](t)(m.Acquire(ctx, "careless", 5*time.Second))
	defer l.Release(ctx)
	expireOnServer(t, conn, "careless")
	taker := must[*lease.Lease](t)(m.TryAcquire(ctx, "careless", 5*time.Second))
	defer taker.Release(ctx)
	h := openSQL(t, "pgx", db.DSN)
	tx := must[*sql.Tx](t)(h.BeginTx(ctx, nil))
	defer tx.Rollback()
	_ = l.Guard(ctx, tx) // ignored, as a careless caller would
	tx.ExecContext(ctx, `INSERT INTO writes VALUES ($1, 'careless')`, l.Token())
	if err := tx.Commit(); err == nil {
		t.Fatal("the transaction committed after a failed guard")
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM writes`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d writes landed, %v", n, err)
	}
}

func TestQueueGuardFencesABatch(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE writes (token bigint, who text)`)
	conn := admin(t, db)
	ctx := context.Background()
	pool := db.Pool()
	m := lease.New(pool)
	l := must[*lease.Lease](t)(m.Acquire(ctx, "batch", 5*time.Second))
	defer l.Release(ctx)
	write := func(who string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			l.QueueGuard(b)
			b.Queue(`INSERT INTO writes VALUES ($1, $2)`, l.Token(), who)
			return tx.SendBatch(ctx, b).Close()
		})
	}
	if err := write("held"); err != nil {
		t.Fatal(err)
	}
	expireOnServer(t, conn, "batch")
	taker := must[*lease.Lease](t)(m.TryAcquire(ctx, "batch", 5*time.Second))
	defer taker.Release(ctx)
	if err := write("stale"); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("batch after takeover: %v, want ErrLost", err)
	}
	if err := write("after loss"); !errors.Is(err, lease.ErrLost) { // refused locally now
		t.Fatalf("batch after loss: %v, want ErrLost", err)
	}
	var held, stale int
	conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE who = 'held'), count(*) FILTER (WHERE who <> 'held') FROM writes`).Scan(&held, &stale)
	if held != 1 || stale != 0 {
		t.Fatalf("%d held writes, %d stale writes", held, stale)
	}
}
