package lease_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/internal/testing/exclusiontest"
	"github.com/sqlock/sqlock/lease"
)

// Worker processes: the test binary run again with childEnv set to a role.
// They report on stdout, one "RESULT …" line at the end.

func runChild(role string) int {
	switch role {
	case "exclusion":
		return exclusionChild()
	case "paused":
		return pausedChild()
	case "fifo":
		return fifoChild()
	case "multi":
		return multiChild()
	}
	fmt.Println("unknown role", role)
	return 2
}

// childManager opens the handle LEASE_BACKEND names on LEASE_DSN, polling
// every LEASE_POLL if set.
func childManager() (m *lease.Manager, db *sql.DB, pool *pgxpool.Pool, err error) {
	dsn := os.Getenv("LEASE_DSN")
	var opts []lease.Option
	opts = append(opts, lease.WithTimeout(2*time.Minute))
	if p, err := time.ParseDuration(os.Getenv("LEASE_POLL")); err == nil {
		opts = append(opts, lease.WithPolling(p))
	}
	switch os.Getenv("LEASE_BACKEND") {
	case "sql":
		db, err = sql.Open("pgx", dsn)
		if err != nil {
			return nil, nil, nil, err
		}
		db.SetMaxIdleConns(16)
		return lease.New(db, opts...), db, nil, nil
	default:
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, nil, nil, err
		}
		cfg.MaxConns = 16
		pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			return nil, nil, nil, err
		}
		return lease.New(pool, opts...), nil, pool, nil
	}
}

// closeHandles closes the handle childManager opened.
func closeHandles(db *sql.DB, pool *pgxpool.Pool) {
	if db != nil {
		db.Close()
	}
	if pool != nil {
		pool.Close()
	}
}

// exclusionChild runs the sections of exclusiontest on leases (TTL 500 ms,
// random hold times). A section enters in a transaction guarded by its
// lease (QueueGuard on pgx, Guard on database/sql) and checks its token
// against the last holder's.
func exclusionChild() int {
	m, db, pool, err := childManager()
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer closeHandles(db, pool)
	ttl, err := time.ParseDuration(os.Getenv("LEASE_TTL"))
	if err != nil {
		fmt.Println("LEASE_TTL:", err)
		return 2
	}
	return exclusiontest.Child(func(ctx context.Context, me string, k int) exclusiontest.Outcome {
		l, err := m.Acquire(ctx, "excl:"+strconv.Itoa(k), ttl)
		if err != nil {
			return exclusiontest.Outcome{Err: err}
		}
		o := exclusiontest.FencedSection(
			func() (int64, error) { return guarded(ctx, db, pool, l, exclusiontest.EnterFenced, me, l.Token(), k) },
			func() (int64, error) { return plain(ctx, db, pool, exclusiontest.LeaveFenced, k, me, l.Token()) },
			time.Millisecond, l.Deadline)
		if err := o.Err; errors.Is(err, lease.ErrLost) {
			// Lost under load before the section could enter (no renewal
			// confirmed in time on a starved machine) — and reported: the
			// guard refused, nothing was written. Only an overlap or an
			// unreported loss breaks the promise. The section runs again.
			o = exclusiontest.Outcome{Lost: true, Redo: true}
			if rerr := l.Release(ctx); rerr != nil && !errors.Is(rerr, lease.ErrNotHeld) {
				o.Err = rerr
			}
			return o
		}
		err = o.Err
		rerr := l.Release(ctx)
		if errors.Is(rerr, lease.ErrNotHeld) && !time.Now().Before(l.Deadline()) {
			// Lost under load (a renewal queued too long) — and reported:
			// the server let go no earlier than the local deadline. The
			// section itself was guarded and checked (or fenced out, and
			// runs again).
			o.Lost = true
			rerr = nil
		}
		if err == nil && errors.Is(rerr, context.DeadlineExceeded) {
			// The release statement ran out of its own bound on a starved
			// machine: the lease then ends by its TTL. The section itself
			// was entered and left under the checks.
			rerr = nil
		}
		o.Err = err
		if err == nil {
			o.Err = rerr
		}
		return o
	})
}

// guarded runs one statement in a transaction guarded by l: through
// QueueGuard in one batch on pgx, through Guard on database/sql.
func guarded(ctx context.Context, db *sql.DB, pool *pgxpool.Pool, l *lease.Lease, q string, args ...any) (rows int64, err error) {
	if pool != nil {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			l.QueueGuard(b)
			b.Queue(q, args...).Exec(func(t pgconn.CommandTag) error {
				rows = t.RowsAffected()
				return nil
			})
			return tx.SendBatch(ctx, b).Close()
		})
		return rows, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if err := l.Guard(ctx, tx); err != nil {
		return 0, err
	}
	r, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	if rows, err = r.RowsAffected(); err != nil {
		return 0, err
	}
	return rows, tx.Commit()
}

// plain runs one statement on its own.
func plain(ctx context.Context, db *sql.DB, pool *pgxpool.Pool, q string, args ...any) (int64, error) {
	if pool != nil {
		t, err := pool.Exec(ctx, q, args...)
		return t.RowsAffected(), err
	}
	r, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// pausedChild acquires LEASE_NAME for LEASE_TTL, says "ACQUIRED <token>",
// and waits for a line on stdin (the parent stops it with SIGSTOP before
// sending it, and continues it after). Then, as a holder that slept
// through its TTL would, it tries to write: first a guarded insert, then a
// hand-fenced update of the register (… WHERE fence <= token). It reports
// whether Lost had fired before it tried, and what each write did.
func pausedChild() int {
	m, db, pool, err := childManager()
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer closeHandles(db, pool)
	ctx := context.Background()
	ttl, _ := time.ParseDuration(os.Getenv("LEASE_TTL"))
	l, err := m.Acquire(ctx, os.Getenv("LEASE_NAME"), ttl)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	fmt.Printf("ACQUIRED %d\n", l.Token())
	bufio.NewReader(os.Stdin).ReadString('\n')
	lost := false
	select {
	case <-l.Lost():
		lost = true
	default:
	}
	guardErr := "nil"
	fenced := int64(-1)
	conn, err := pgx.Connect(ctx, os.Getenv("LEASE_DSN"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := l.Guard(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO writes VALUES ($1, 'paused holder')`, l.Token())
		return err
	})
	switch {
	case errors.Is(err, lease.ErrLost):
		guardErr = "ErrLost"
	case err != nil:
		guardErr = strconv.Quote(err.Error())
	}
	tag, err := conn.Exec(ctx, `UPDATE register SET value = 'paused holder', fence = $1 WHERE id = 1 AND fence <= $1`, l.Token())
	if err == nil {
		fenced = tag.RowsAffected()
	}
	relErr := l.Release(ctx)
	fmt.Printf("RESULT lost=%t guard=%s fenced=%d release=%t\n", lost, guardErr, fenced, errors.Is(relErr, lease.ErrNotHeld))
	return 0
}

// fifoChild waits for LEASE_NAME, then says "RESULT <token> <ticket>" and
// releases it at once.
func fifoChild() int {
	m, db, pool, err := childManager()
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer closeHandles(db, pool)
	ctx := context.Background()
	l, err := m.Acquire(ctx, os.Getenv("LEASE_NAME"), time.Minute)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	fmt.Printf("RESULT %d %d\n", l.Token(), lease.Ticket(l))
	if err := l.Release(ctx); err != nil {
		fmt.Println(err)
		return 2
	}
	return 0
}

// multiChild takes x, y and z together and releases them, again and again,
// saying "READY" after the first grant, until it is killed.
func multiChild() int {
	m, db, pool, err := childManager()
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer closeHandles(db, pool)
	ctx := context.Background()
	for i := 0; ; i++ {
		ls, err := m.AcquireAll(ctx, []string{"z", "x", "y"}, time.Minute)
		if err != nil {
			fmt.Println(err)
			return 2
		}
		if i == 0 {
			fmt.Println("READY")
		}
		if err := ls.Release(ctx); err != nil {
			fmt.Println(err)
			return 2
		}
	}
}
