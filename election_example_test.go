package sqlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/lease"
)

// Code written against Election runs on any backend that elects: here
// leases; etcdlock's (*Candidate).Election is the same interface. The
// leader works under its leadership's Context, which ends if the
// leadership is lost and carries the term to fenced writes, and resigns
// when done so that the next candidate wins at once.
func ExampleElection() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	table := lease.WithTable("example_election_leases")
	if err := lease.MigrateElections(ctx, db, table); err != nil {
		log.Fatal(err)
	}
	host, _ := os.Hostname()
	lead := func(e sqlock.Election) error {
		l, err := e.Campaign(ctx) // waits until this candidate leads
		if err != nil {
			return err
		}
		work, cancel := l.Context(ctx) // ends if the leadership is lost
		defer cancel()
		term, _ := sqlock.FencingToken(work)
		fmt.Println("leading; the term is the fencing token:", term == l.Token())
		_, leaderTerm, err := e.Leader(ctx) // what every candidate reads
		fmt.Println("everyone reads this term:", err == nil && leaderTerm == term)
		return l.Resign(ctx)
	}
	e := lease.New(db, table).Candidate("example-election", host, 10*time.Second).Election()
	if err := lead(e); err != nil {
		log.Fatal(err)
	}
	_, _, err = e.Leader(ctx)
	fmt.Println("after resigning:", errors.Is(err, sqlock.ErrNoLeader))
	// Output:
	// leading; the term is the fencing token: true
	// everyone reads this term: true
	// after resigning: true
}
