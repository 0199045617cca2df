package lease_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/sqlock/sqlock/lease"
)

// WithHolder and WithPayload say who holds a Manager's leases: stored in
// the lease's row, shown by `sqlock leases` and inspect.
func ExampleWithHolder() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := lease.Migrate(ctx, db, exampleTable); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(db, exampleTable, lease.WithHolder("billing-worker-3 pid 4121"), lease.WithPayload([]byte(`{"job":42}`)))
	l, err := leases.Acquire(ctx, "invoices:nightly", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fmt.Println(l.Holder(), string(l.Payload()))
	// Output: billing-worker-3 pid 4121 {"job":42}
}

// AcquireAll takes several names or none: a transfer holds both accounts.
func ExampleManager_AcquireAll() {
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
	both, err := leases.AcquireAll(ctx, []string{"account:9", "account:3", "account:9"}, 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer both.Release(ctx)
	fmt.Println(both.Names())
	_, err = leases.TryAcquire(ctx, "account:3", 5*time.Second)
	fmt.Println("account:3 taken:", err != nil)
	// Output:
	// [account:3 account:9]
	// account:3 taken: true
}
