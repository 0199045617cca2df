// Command benchreport regenerates docs/benchmarks.md, benchmarks.txt,
// benchmarks-rtt.txt and contention.svg (make bench-report): it runs every
// package's Go benchmarks against the PostgreSQL in DATABASE_URL (the
// Makefile starts a throwaway one) over loopback; then the benchmarks whose
// cost is round trips again through internal/testing/pgtest's proxy, which adds a
// simulated network round trip (-rtt), after measuring the proxy's own
// cost; then the contention sweep on a private cluster with production
// durability; and writes the targets, the tables and the plot. Every figure
// and ratio comes from this run's output.
//
//	go run ./internal/benchreport [-count 3] [-rtt 500us] [-workers 1,2,4,8,16,32,64] [-out docs]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/internal/tools/contention"
)

func main() {
	count := flag.Int("count", 3, "go test -count for the benchmarks (medians are reported)")
	workerList := flag.String("workers", "1,2,4,8,16,32,64", "worker counts for the contention sweep")
	work := flag.Int("work", 2000, "increments per contention point (split among the workers)")
	out := flag.String("out", "docs", "output directory")
	skipBench := flag.Bool("skip-bench", false, "only the contention sweep")
	loopback := flag.Bool("loopback", true, "run the loopback benchmarks (false: keep only the network section and the sweeps)")
	deadlines := flag.String("deadlines", "25ms,50ms,100ms,200ms,400ms", "per-call deadlines of the deadline sweep (empty: none)")
	rtt := flag.Duration("rtt", 500*time.Microsecond, "round-trip time of the network section (0: none)")
	netBenchtime := flag.String("rtt-benchtime", "1s", "go test -benchtime of the network section")
	rounds := flag.Int("rounds", 3, "contention sweeps, interleaved point by point (medians are reported, with the spread)")
	flag.Parse()
	if err := run(*count, *workerList, *work, *rounds, *out, *skipBench, *deadlines, *rtt, *netBenchtime, *loopback); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(count int, workerList string, work, rounds int, out string, skipBench bool, deadlineList string, rtt time.Duration, netBenchtime string, loopback bool) error {
	if rounds < 1 {
		return fmt.Errorf("bad -rounds %d", rounds)
	}
	var workers []int
	for _, s := range strings.Split(workerList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("bad worker count %q", s)
		}
		workers = append(workers, n)
	}
	started := time.Now()
	load := [2]string{loadavg()}
	var benches []bench
	if !skipBench && loopback {
		fmt.Fprintln(os.Stderr, "running go test -bench . ./… (this takes a few minutes)")
		patterns, err := workspacePackages()
		if err != nil {
			return err
		}
		args := append([]string{"test", "-p", "1", "-run", "^$", "-bench", ".", "-benchmem",
			"-count", strconv.Itoa(count), "-timeout", "30m"}, patterns...)
		cmd := exec.Command("go", args...)
		var buf bytes.Buffer
		cmd.Stdout = &buf
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			os.Stderr.Write(buf.Bytes())
			return fmt.Errorf("benchmarks: %w", err)
		}
		if err := os.WriteFile(filepath.Join(out, "benchmarks.txt"), buf.Bytes(), 0o644); err != nil {
			return err
		}
		benches = parse(buf.String())
	}
	ctx := context.Background()
	var net *netRun
	if !skipBench && rtt > 0 {
		dsn := os.Getenv(pgtest.EnvDSN)
		if dsn == "" { // not under withpg: a server of its own for this section
			c, err := pgtest.StartCluster(ctx, pgtest.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			dsn = c.AdminDSN()
		}
		var err error
		if net, err = runNetwork(ctx, dsn, rtt, count, netBenchtime); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "benchmarks-rtt.txt"), net.raw, 0o644); err != nil {
			return err
		}
	}

	fmt.Fprintln(os.Stderr, "contention sweep on a private cluster (fsync on)…")
	cluster, err := pgtest.StartCluster(ctx, pgtest.Options{Settings: map[string]string{
		"fsync": "on", "full_page_writes": "on", "synchronous_commit": "on", "max_connections": "300",
	}})
	if err != nil {
		return err
	}
	defer cluster.Close()
	dbName, err := cluster.CreateDatabase(ctx)
	if err != nil {
		return err
	}
	dsn := pgtest.WithDatabase(cluster.AdminDSN(), dbName)
	// Rounds are interleaved point by point (every mode at one worker
	// count, round after round), so that a load change on the machine
	// falls on all the modes of a point alike.
	var all []contention.Result
	loadBefore := loadavg()
	for _, w := range workers {
		for round := range rounds {
			for _, mode := range contention.Modes {
				per := max(work/w, 20)
				r, err := contention.Run(ctx, dsn, mode, w, per)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "  [%d] %-20s %2d workers: %6.0f/s p50 %6.2fms p99 %7.2fms retries %d locked %d\n",
					round+1, mode, w, r.Throughput, ms(r.P50), ms(r.P99), r.Retries, r.Locked)
				all = append(all, r)
			}
		}
	}
	sweepLoad := fmt.Sprintf("load average %s at the start of the sweep, %s at its end", loadBefore, loadavg())
	results := medians(all)
	if err := os.WriteFile(filepath.Join(out, "contention.svg"), []byte(contentionPlot(results, workers)), 0o644); err != nil {
		return err
	}
	deadlines, err := deadlineSweep(ctx, cluster, deadlineList)
	if err != nil {
		return err
	}
	load[1] = loadavg()
	md := report(benches, net, results, workers, count, time.Since(started), load) +
		hybridMarkdown(all, workers, rounds, sweepLoad) + contention.DeadlinesMarkdown(deadlines)
	return os.WriteFile(filepath.Join(out, "benchmarks.md"), []byte(md), 0o644)
}

// deadlineSweep runs contention.SweepDeadlines at 32 workers on every
// form, 20 calls per worker, each run on a database of its own.
func deadlineSweep(ctx context.Context, cluster *pgtest.Cluster, list string) ([]contention.DeadlineResult, error) {
	var ds []time.Duration
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("bad deadline %q", s)
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		return nil, nil
	}
	fmt.Fprintln(os.Stderr, "deadline sweep…")
	newDB := func(ctx context.Context) (string, func(), error) {
		name, err := cluster.CreateDatabase(ctx)
		if err != nil {
			return "", nil, err
		}
		return pgtest.WithDatabase(cluster.AdminDSN(), name), func() { cluster.DropDatabase(ctx, name) }, nil
	}
	return contention.SweepDeadlines(ctx, contention.DeadlineConfig{Workers: 32, Pool: 32, Calls: 20}, ds, contention.DeadlineForms, newDB)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// loadavg is /proc/loadavg's three load averages, or "unknown".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], ", ")
	}
	return "unknown"
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				if _, v, ok := strings.Cut(line, ":"); ok {
					model = strings.TrimSpace(v)
				}
				break
			}
		}
	}
	pg := "PostgreSQL"
	if out, err := exec.Command("sh", "-c", "ls -d /usr/lib/postgresql/*/bin/postgres | tail -1").Output(); err == nil {
		if v, err := exec.Command(strings.TrimSpace(string(out)), "--version").Output(); err == nil {
			pg = strings.TrimSpace(string(v))
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s %s/%s, %s on a throwaway cluster over loopback TCP",
		runtime.NumCPU(), model, runtime.Version(), runtime.GOOS, runtime.GOARCH, pg)
}

// workspacePackages names every module of the workspace by its own
// pattern: in workspace mode ./... stops at the root module, and redislock
// is a module of its own.
func workspacePackages() ([]string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m: %w", err)
	}
	var patterns []string
	for _, dir := range strings.Fields(string(out)) {
		patterns = append(patterns, dir+"/...")
	}
	return patterns, nil
}
