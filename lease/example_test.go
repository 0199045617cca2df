package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/sqlock/sqlock/lease"
)

// The examples use a table of their own, so they leave nothing in the way
// of a program's sqlock_leases.
var exampleTable = lease.WithTable("example_leases")

// Migrate creates the table once, at start-up (concurrent calls are safe).
// New takes a *sql.DB or a *pgxpool.Pool.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := lease.Migrate(ctx, pool, exampleTable); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(pool, exampleTable, lease.WithTimeout(2*time.Second))

	l, err := leases.Acquire(ctx, "nightly-report", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fmt.Println("holding", l.Name())
	// Output: holding nightly-report
}

// DDL prints the statements for a migration tool.
func ExampleDDL() {
	ddl, err := lease.DDL()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.SplitN(ddl, "\n", 2)[0])
	// Output: CREATE SEQUENCE IF NOT EXISTS "sqlock_leases_token_seq" AS bigint NO CYCLE;
}

// Migrate works on a *sql.DB too.
func ExampleMigrate() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := lease.Migrate(context.Background(), db, exampleTable); err != nil {
		log.Fatal(err)
	}
	fmt.Println("migrated")
	// Output: migrated
}

// TryAcquire does not wait: a held lease is ErrNotAcquired at once.
func ExampleManager_TryAcquire() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := lease.Migrate(ctx, db, exampleTable); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(db, exampleTable)

	first, err := leases.TryAcquire(ctx, "cron:cleanup", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer first.Release(ctx)
	_, err = leases.TryAcquire(ctx, "cron:cleanup", 5*time.Second)
	fmt.Println("second replica:", errors.Is(err, lease.ErrNotAcquired))
	// Output: second replica: true
}

// Acquire waits for the holder to release (or for its lease to expire);
// the token of every new holder is greater.
func ExampleManager_Acquire() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := lease.Migrate(ctx, pool, exampleTable); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(pool, exampleTable)

	first, err := leases.Acquire(ctx, "leader", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // the first holder's work
		first.Release(ctx)
	}()
	next, err := leases.Acquire(ctx, "leader", 5*time.Second) // woken by the release
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	fmt.Println("token increased:", next.Token() > first.Token())
	// Output: token increased: true
}

// Guard, in the caller's transaction, makes the writes commit only while
// the lease is still this holder's; a holder that was paused past its TTL
// gets ErrLost and its writes never land.
func ExampleLease_Guard() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := lease.Migrate(ctx, db, exampleTable); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS example_report (token bigint, body text)`); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(db, exampleTable)
	l, err := leases.Acquire(ctx, "report", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := l.Guard(ctx, tx); errors.Is(err, lease.ErrLost) {
		log.Print("lost the lease: not writing")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO example_report VALUES ($1, 'done')`, l.Token()); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("written under the lease")
	// Output: written under the lease
}

// QueueGuard puts the guard in a pgx batch ahead of the writes: the check
// travels with them, in the same round trip.
func ExampleLease_QueueGuard() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := lease.Migrate(ctx, pool, exampleTable); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(pool, exampleTable)
	l, err := leases.Acquire(ctx, "stock-sync", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		l.QueueGuard(b)
		b.Queue(`SELECT $1::bigint`, l.Token()) // the caller's writes
		return tx.SendBatch(ctx, b).Close()
	})
	fmt.Println("batch committed:", err == nil)
	// Output: batch committed: true
}

// Context gives the work a context that ends when the lease can no longer
// be trusted; Lost and Err say the same as a channel and an error.
func ExampleLease_Context() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := lease.Migrate(ctx, pool, exampleTable); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(pool, exampleTable, lease.WithMaxHold(200*time.Millisecond))
	l, err := leases.Acquire(ctx, "bounded-job", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	work, cancel := l.Context(ctx)
	defer cancel()

	<-work.Done() // a long job, cut off at the maximum hold
	<-l.Lost()
	fmt.Println(errors.Is(context.Cause(work), lease.ErrLost), errors.Is(l.Err(), lease.ErrLost))
	// Output: true true
}

// Release is owner-checked: after the lease expired and was taken over it
// returns ErrNotHeld and changes nothing.
func ExampleLease_Release() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := lease.Migrate(ctx, pool, exampleTable); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(pool, exampleTable)
	l, err := leases.Acquire(ctx, "release-me", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Release(ctx))
	fmt.Println(errors.Is(l.Release(ctx), lease.ErrNotHeld))
	// Output:
	// <nil>
	// true
}

// WithPolling is for PgBouncer in transaction mode, where LISTEN cannot
// work: waiters poll, never past the holder's expiry.
func ExampleWithPolling() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // through PgBouncer: add default_query_exec_mode=exec
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := lease.Migrate(ctx, pool, exampleTable); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(pool, exampleTable, lease.WithPolling(25*time.Millisecond))
	l, err := leases.Acquire(ctx, "behind-pgbouncer", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fmt.Println("token > 0:", l.Token() > 0)
	// Output: token > 0: true
}
