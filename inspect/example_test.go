package inspect_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/inspect"
)

// Who holds booking:seat-42, and who waits for it.
func ExampleTake() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer db.Close()

	// Another session holds the lock, as SQL would take it.
	other, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer other.Close(ctx)
	n, _ := advisory.KeyOf("booking:seat-42").Int64()
	if _, err := other.Exec(ctx, "SELECT pg_advisory_lock($1)", n); err != nil {
		panic(err)
	}

	snap, err := inspect.Take(ctx, db, inspect.WithNames("booking:seat-42"))
	if err != nil {
		panic(err)
	}
	for _, l := range snap.Locks {
		if l.Session.PID == int(other.PgConn().PID()) {
			fmt.Println(l.KeyLabel(), "shared:", l.Shared, "granted:", l.Granted, "scope:", l.Scope,
				"waiters:", snap.Waiters()[l.KeyLabel()])
		}
	}
	// Output: booking:seat-42 shared: false granted: true scope: session waiters: 0
}
