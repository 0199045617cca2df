package sqlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/lease"
)

// A nil handle is refused by every package with an error that matches
// sqlock.ErrNilHandle, before anything is sent.
func Example() {
	err := advisory.New(nil).Do(context.Background(), advisory.KeyOf("job:1"), func(context.Context) error { return nil })
	fmt.Println(errors.Is(err, sqlock.ErrNilHandle))
	// Output: true
}

// Code written against Acquirer and Lock runs on any backend: switching is
// changing the constructor. A lock that mints fencing tokens (a lease) is
// also a Fenced.
func ExampleAcquirer() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	table := lease.WithTable("example_leases")
	if err := lease.Migrate(ctx, db, table); err != nil {
		log.Fatal(err)
	}
	report := func(locks sqlock.Acquirer) error {
		lk, err := locks.Acquire(ctx, "nightly-report")
		if err != nil {
			return err
		}
		defer lk.Release(ctx)
		ctx, cancel := lk.Context(ctx) // ends if the lock is lost
		defer cancel()
		_ = ctx // … write the report with ctx …
		if f, ok := lk.(sqlock.Fenced); ok {
			fmt.Println("written under a fencing token:", f.Token() > 0)
		} else {
			fmt.Println("written, no fencing token")
		}
		return lk.Release(ctx)
	}
	for _, locks := range []sqlock.Acquirer{
		advisory.New(db).Acquirer(),
		lease.New(db, table).Acquirer(10 * time.Second),
	} {
		if err := report(locks); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// written, no fencing token
	// written under a fencing token: true
}
