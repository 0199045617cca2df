package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/txlock"
)

// BeginGuarded begins a transaction the lease already guards. On a
// *sql.DB opened with txlock.OpenDB the guard travels with BEGIN, so the
// guarded transaction costs no more round trips than an unguarded one.
func ExampleLease_BeginGuarded() {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	db := txlock.OpenDB(*cfg)
	defer db.Close()
	if err := lease.Migrate(ctx, db, exampleTable); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS example_report (token bigint, body text)`); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(db, exampleTable)
	l, err := leases.Acquire(ctx, "report-begin", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	tx, err := l.BeginGuarded(ctx, db, nil)
	if errors.Is(err, lease.ErrLost) {
		log.Print("lost the lease: not writing")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO example_report VALUES ($1, 'done')`, l.Token()); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("written under the lease")
	// Output: written under the lease
}

// With pgx, queue the guard right after Batch.BeginTx: BEGIN, the guard
// and the writes go in one round trip.
func ExampleLease_QueueGuard_begin() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := lease.Migrate(ctx, pool, exampleTable); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_report (token bigint, body text)`); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(pool, exampleTable)
	l, err := leases.Acquire(ctx, "report-pgx-begin", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	l.QueueGuard(b)
	b.Queue(`INSERT INTO example_report VALUES ($1, 'done')`, l.Token())
	br := pool.SendBatch(ctx, b) // the pool keeps the connection until the transaction ends
	tx := br.Tx()
	defer tx.Rollback(ctx)
	if err := br.Close(); errors.Is(err, lease.ErrLost) {
		log.Print("lost the lease: nothing written")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("written under the lease")
	// Output: written under the lease
}
