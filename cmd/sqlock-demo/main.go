// Command sqlock-demo reproduces the races sqlock stops — a double charge,
// a client's retry charged again, the last seat sold twice, negative stock, a task processed twice, a lock
// holder frozen past its lease — with several OS processes as replicas, and
// shows each mechanism preventing them. `make demo` runs it against a
// throwaway PostgreSQL.
//
//	sqlock-demo [-dsn postgres://…] [-scenario payment,client-retry,seat,stock,claim,paused]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/sqlock/sqlock/internal/tools/demo"
)

func main() {
	demo.MaybeWorker() // replicas are this binary, started by the coordinator
	dsn := flag.String("dsn", "", "an existing PostgreSQL database to use (its tables orders, charges, replicas, demo_idem, seats, bookings, products, tasks, account and demo_leases are dropped and recreated); default: a throwaway cluster")
	only := flag.String("scenario", "", "comma-separated scenarios to run (payment, client-retry, seat, stock, claim, paused); default: all")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var names []string
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	if err := demo.Run(ctx, demo.Config{DSN: *dsn, Scenarios: names, Out: os.Stdout, Progress: os.Stderr}); err != nil {
		fmt.Fprintln(os.Stderr, "sqlock-demo:", err)
		os.Exit(1)
	}
}
