package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
)

// New takes a database/sql pool (any PostgreSQL driver). Verify checks the
// server once, up front; without it the first lock does.
func ExampleNew() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l := advisory.New(db,
		advisory.WithTimeout(2*time.Second), // the longest any acquisition waits
		advisory.WithKeepalive(time.Second), // how soon a lost lock is noticed
	)
	switch err := l.Verify(context.Background()); {
	case errors.Is(err, sqlock.ErrUnsupported):
		log.Fatal("no session locks here (CockroachDB? PgBouncer in transaction mode?): ", err)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println("ready")
	// Output: ready
}

// Do runs a critical section that only one holder, in any process, runs at
// a time. The function's context ends if the lock is lost.
func ExampleLocker_Do() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l := advisory.New(db, advisory.WithTimeout(3*time.Second))

	err = l.Do(context.Background(), advisory.KeyOf("payment:order-123"), func(ctx context.Context) error {
		fmt.Println("charging order 123, alone")
		return nil // work that uses ctx stops when the lock is lost
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: charging order 123, alone
}

// Lock and Release, for a hold that does not fit one function. Release runs
// even on a cancelled context, and Lost reports a dead connection.
func ExampleLocker_Lock() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l := advisory.New(db)
	ctx := context.Background()

	lk, err := l.Lock(ctx, advisory.KeyOf("nightly-report"))
	switch {
	case errors.Is(err, advisory.ErrTimeout):
		fmt.Println("someone else is running it")
		return
	case err != nil:
		log.Fatal(err)
	}
	defer lk.Release(ctx)

	select {
	case <-lk.Lost():
		fmt.Println("lock lost: stop")
	default:
		fmt.Println("holding", lk.Key().String() != "")
	}
	// Output: holding true
}

// TryLock takes the lock only if nobody holds it.
func ExampleLocker_TryLock() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	key := advisory.KeyPair(7, 42) // the two-int4 key space: pg_advisory_lock(7, 42)

	first, err := advisory.New(db).TryLock(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	_, err = advisory.New(db).TryLock(ctx, key)
	fmt.Println("second holder:", errors.Is(err, advisory.ErrNotAcquired))
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: second holder: true
}

// RLock takes the lock in shared mode: readers together, writers alone.
func ExampleLocker_RLock() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l := advisory.New(db)
	ctx := context.Background()
	key := advisory.KeyOf("catalog")

	r1, err := l.RLock(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	r2, err := l.TryRLock(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	_, err = l.TryLock(ctx, key)
	fmt.Println("two readers; writer refused:", errors.Is(err, advisory.ErrNotAcquired))
	r1.Release(ctx)
	r2.Release(ctx)
	// Output: two readers; writer refused: true
}

// NewPool is the same Locker on a pgx pool.
func ExampleNewPool() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	l := advisory.NewPool(pool, advisory.WithKeepalive(time.Second))
	if err := l.Verify(ctx); err != nil { // fail fast: not PostgreSQL, or behind PgBouncer in transaction mode
		log.Fatal(err)
	}
	err = l.Do(ctx, advisory.KeyInt(2024), func(ctx context.Context) error {
		fmt.Println("migrating, alone")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: migrating, alone
}

// WithMultiplexing holds many locks on few connections: a thousand
// per-tenant locks taken with TryLock ride one shared connection, and the
// pool has it back once the last of them is released.
func ExampleWithMultiplexing() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	l := advisory.NewPool(pool, advisory.WithMultiplexing(2))
	var locks []*advisory.Lock
	for i := range 1000 {
		lk, err := l.TryLock(ctx, advisory.KeyOf(fmt.Sprintf("tenant:%d", i)))
		if err != nil {
			log.Fatal(err)
		}
		locks = append(locks, lk)
	}
	fmt.Println("held:", len(locks), "on connections:", pool.Stat().AcquiredConns())
	for _, lk := range locks {
		if err := lk.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("after release:", pool.Stat().AcquiredConns())
	// Output:
	// held: 1000 on connections: 1
	// after release: 0
}
