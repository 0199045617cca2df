package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/lease"
)

// At most three exports at once, in every process on the database: each
// holder has a slot of its own, a lease with its index and fencing token.
// MigrateSemaphores creates the slots' table once, at start-up.
func ExampleManager_Semaphore() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := lease.MigrateSemaphores(ctx, pool, exampleTable); err != nil {
		log.Fatal(err)
	}
	exports := lease.New(pool, exampleTable, lease.WithTimeout(2*time.Second)).Semaphore(3, 10*time.Second)

	var held []sqlock.Slot
	for range 3 {
		s, err := exports.TryAcquire(ctx, "example:exports")
		if err != nil {
			log.Fatal(err)
		}
		defer s.Release(ctx)
		held = append(held, s)
	}
	fmt.Println("slots:", held[0].Index(), held[1].Index(), held[2].Index())

	_, err = exports.TryAcquire(ctx, "example:exports")
	fmt.Println("a fourth:", errors.Is(err, sqlock.ErrNotAcquired))

	// A semaphore of another size on the same name is refused, typed.
	_, err = lease.New(pool, exampleTable).Semaphore(5, 10*time.Second).TryAcquire(ctx, "example:exports")
	fmt.Println("another size:", errors.Is(err, sqlock.ErrSemaphoreSize))
	// Output:
	// slots: 0 1 2
	// a fourth: true
	// another size: true
}
