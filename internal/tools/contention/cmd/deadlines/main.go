// Command deadlines runs the deadline scenario of internal/tools/contention
// (issue 13) on a private PostgreSQL cluster and prints one table per
// deadline and a summary of successes and new connections per second:
//
//	go run ./internal/tools/contention/cmd/deadlines [-deadlines 25ms,50ms,100ms,200ms,400ms] [-calls 20]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/internal/tools/contention"
)

func main() {
	deadlines := flag.String("deadlines", "100ms", "comma-separated per-call deadlines")
	workers := flag.Int("workers", 32, "concurrent callers")
	pool := flag.Int("pool", 32, "pool size")
	hold := flag.Duration("hold", 5*time.Millisecond, "critical section")
	calls := flag.Int("calls", 20, "calls per worker (0: -duration)")
	duration := flag.Duration("duration", 0, "measured time per run when -calls is 0")
	check := flag.Duration("check-interval", 0, "server client_connection_check_interval (0: off)")
	extra := flag.Bool("extra", false, "also txlock.DoPgx with WithTimeout(deadline - margin)")
	flag.Parse()
	if err := run(*deadlines, *workers, *pool, *hold, *calls, *duration, *extra, *check); err != nil {
		fmt.Fprintln(os.Stderr, "deadlines:", err)
		os.Exit(1)
	}
}

func run(list string, workers, pool int, hold time.Duration, calls int, duration time.Duration, extra bool, check time.Duration) error {
	ctx := context.Background()
	settings := map[string]string{}
	if check > 0 {
		settings["client_connection_check_interval"] = fmt.Sprint(check.Milliseconds())
	}
	cluster, err := pgtest.StartCluster(ctx, pgtest.Options{Settings: settings})
	if err != nil {
		return err
	}
	defer cluster.Close()
	forms := contention.DeadlineForms
	if extra {
		forms = append(forms[:len(forms):len(forms)], contention.FormTxLockPgxTimeout)
	}
	var ds []time.Duration
	for _, s := range strings.Split(list, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	base := contention.DeadlineConfig{Workers: workers, Pool: pool, Hold: hold, Calls: calls, Duration: duration}
	newDB := func(ctx context.Context) (string, func(), error) {
		name, err := cluster.CreateDatabase(ctx)
		if err != nil {
			return "", nil, err
		}
		return pgtest.WithDatabase(cluster.AdminDSN(), name), func() { cluster.DropDatabase(ctx, name) }, nil
	}
	all, err := contention.SweepDeadlines(ctx, base, ds, forms, newDB)
	if err != nil {
		return err
	}
	for i := 0; i < len(all); i += len(forms) {
		fmt.Printf("%d workers, pool %d, hold %v, deadline %v, client_connection_check_interval %v:\n%s\n",
			workers, pool, hold, all[i].Config.Deadline, check, contention.FormatDeadlines(all[i:i+len(forms)]))
	}
	fmt.Println(contention.DeadlinesMarkdown(all))
	fmt.Printf("%-38s %8s %8s %8s %9s %7s\n", "form", "deadline", "ok/s", "dials/s", "ok%", "margin")
	for _, r := range all {
		fmt.Printf("%-38s %8v %8.0f %8.0f %8.1f%% %7v\n", r.Config.Form, r.Config.Deadline, r.SuccessesPerSecond(),
			float64(r.Dials)/r.Elapsed.Seconds(), 100*float64(r.Successes)/float64(r.Calls), r.HandMargin.Round(time.Millisecond))
	}
	return nil
}
