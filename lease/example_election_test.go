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

// One replica of a service runs the scheduler: every replica campaigns,
// the winner leads until it resigns or its lease is lost, and the others
// read who leads.
func ExampleManager_Candidate() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	table := lease.WithTable("example_candidate_leases")
	if err := lease.MigrateElections(ctx, db, table); err != nil {
		log.Fatal(err)
	}
	m := lease.New(db, table)
	me := m.Candidate("scheduler", "replica-1", 10*time.Second)
	l, err := me.Campaign(ctx)
	if err != nil {
		log.Fatal(err)
	}
	other := m.Candidate("scheduler", "replica-2", 10*time.Second)
	id, term, err := other.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", id, "term is the lease's token:", term == l.Token())
	select {
	case <-l.Lost(): // stop scheduling: someone else may lead now
	default:
	}
	if err := l.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: leader: replica-1 term is the lease's token: true
}
