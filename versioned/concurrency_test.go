package versioned_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" for the child processes

	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

const counterSchema = `CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL, version bigint NOT NULL DEFAULT 0);
	INSERT INTO counters (id, n) VALUES (1, 0)`

// retryOpts lets a hot row be retried until it succeeds: the attempt cap is
// a safety net that a correct run never reaches (the context bounds time).
var retryOpts = []retry.Option{
	retry.WithMaxAttempts(100000),
	retry.WithBackoff(retry.Exponential(50*time.Microsecond, 5*time.Millisecond)),
}

// increment is one read–modify–write through the versioned helper inside
// retry.Do; attempts counts every run of the function.
func increment(ctx context.Context, db *sql.DB, counters *versioned.Table, attempts *atomic.Int64) error {
	return retry.Do(ctx, func(ctx context.Context) error {
		attempts.Add(1)
		var n, v int64
		if err := db.QueryRowContext(ctx, `SELECT n, version FROM counters WHERE id = 1`).Scan(&n, &v); err != nil {
			return err
		}
		_, err := versioned.Update(ctx, db, counters, 1, v, versioned.Set("n", n+1))
		return err
	}, retryOpts...)
}

// Invariant 1: 32 goroutines × 500 read–modify–write increments of one row
// lose nothing.
func TestNoLostUpdate(t *testing.T) {
	const workers, each = 32, 500
	pg := pgtest.New(t)
	pg.Exec(counterSchema)
	db := pg.SQL()
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	ctx := ctxT(t)
	rec := &observetest.Recorder{}
	counters := versioned.MustTable("counters", versioned.WithObserver(rec))

	var attempts atomic.Int64
	start := make(chan struct{})
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < each; i++ {
				if err := increment(ctx, db, counters, &attempts); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n, v int64
	if err := db.QueryRow(`SELECT n, version FROM counters WHERE id = 1`).Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if n != workers*each || v != workers*each {
		t.Fatalf("counter = %d at version %d, want %d", n, v, workers*each)
	}
	retries := attempts.Load() - workers*each
	stale := int64(len(rec.Events()))
	if stale != retries {
		t.Fatalf("%d retries but %d stale events observed", retries, stale)
	}
	t.Logf("%d×%d increments = %d in %v: %d attempts, %d retries on stale versions (%.2f per increment)",
		workers, each, n, time.Since(began).Round(time.Millisecond), attempts.Load(), retries,
		float64(retries)/float64(workers*each))
}

const childEnv = "SQLOCK_VERSIONED_CHILD_DSN"

// childMain is a re-executed test binary: it runs increments against the
// DSN in the environment and prints its attempt count.
func childMain() int {
	dsn := os.Getenv(childEnv)
	workers, _ := strconv.Atoi(os.Getenv("SQLOCK_VERSIONED_CHILD_WORKERS"))
	each, _ := strconv.Atoi(os.Getenv("SQLOCK_VERSIONED_CHILD_EACH"))
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	counters := versioned.MustTable("counters")
	var attempts atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Bool
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := increment(ctx, db, counters, &attempts); err != nil {
					fmt.Fprintln(os.Stderr, err)
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		return 1
	}
	fmt.Printf("attempts %d\n", attempts.Load())
	return 0
}

// Invariant 1 across OS processes: several re-executed test binaries, each
// with its own connection pool, increment the same row.
func TestNoLostUpdateProcesses(t *testing.T) {
	const procs, workers, each = 4, 4, 150
	pg := pgtest.New(t)
	pg.Exec(counterSchema)
	ctx := ctxT(t)
	type out struct {
		attempts int64
		err      error
	}
	results := make(chan out, procs)
	for p := 0; p < procs; p++ {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+pg.DSN,
			"SQLOCK_VERSIONED_CHILD_WORKERS="+strconv.Itoa(workers),
			"SQLOCK_VERSIONED_CHILD_EACH="+strconv.Itoa(each))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			var o out
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if a, ok := strings.CutPrefix(sc.Text(), "attempts "); ok {
					o.attempts, _ = strconv.ParseInt(a, 10, 64)
				}
			}
			if err := cmd.Wait(); err != nil {
				o.err = fmt.Errorf("child: %v\n%s", err, stderr.String())
			} else if o.attempts == 0 {
				o.err = errors.New("child printed no attempt count")
			}
			results <- o
		}()
	}
	var attempts int64
	for p := 0; p < procs; p++ {
		o := <-results
		if o.err != nil {
			t.Fatal(o.err)
		}
		attempts += o.attempts
	}
	var n int64
	if err := pg.SQL().QueryRow(`SELECT n FROM counters WHERE id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	const want = procs * workers * each
	if n != want {
		t.Fatalf("counter = %d, want %d", n, want)
	}
	t.Logf("%d processes × %d goroutines × %d increments = %d: %d retries", procs, workers, each, n, attempts-want)
}

// Compare-and-swap: 64 goroutines claim one task; exactly one wins and 63
// see a clean Lost, round after round.
func TestCompareAndSwapRace(t *testing.T) {
	const claimers, rounds = 64, 10
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE tasks (id bigint PRIMARY KEY, status text NOT NULL, worker_id int);
		INSERT INTO tasks VALUES (1, 'unclaimed', NULL)`)
	db := pg.SQL()
	db.SetMaxOpenConns(claimers)
	db.SetMaxIdleConns(claimers)
	ctx := ctxT(t)
	tasks := versioned.MustTable("tasks")
	for round := 0; round < rounds; round++ {
		pg.Exec(`UPDATE tasks SET status = 'unclaimed', worker_id = NULL WHERE id = 1`)
		var counts [4]atomic.Int64
		var winner atomic.Int64
		start := make(chan struct{})
		errs := make(chan error, claimers)
		var wg sync.WaitGroup
		for w := 1; w <= claimers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := versioned.CompareAndSwap(ctx, db, tasks, int64(1),
					[]versioned.Pair{versioned.Eq("status", "unclaimed")},
					versioned.Set("status", "claimed"), versioned.Set("worker_id", w))
				if err != nil {
					errs <- err
					return
				}
				counts[res].Add(1)
				if res == versioned.Won {
					winner.Store(int64(w))
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if counts[versioned.Won].Load() != 1 || counts[versioned.Lost].Load() != claimers-1 || counts[versioned.Missing].Load() != 0 {
			t.Fatalf("round %d: won %d lost %d missing %d", round, counts[versioned.Won].Load(),
				counts[versioned.Lost].Load(), counts[versioned.Missing].Load())
		}
		var status string
		var worker int64
		if err := db.QueryRow(`SELECT status, worker_id FROM tasks WHERE id = 1`).Scan(&status, &worker); err != nil {
			t.Fatal(err)
		}
		if status != "claimed" || worker != winner.Load() {
			t.Fatalf("round %d: row is %s by %d, winner was %d", round, status, worker, winner.Load())
		}
	}
}

func TestCompareAndSwapOutcomes(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE tasks (id bigint PRIMARY KEY, status text NOT NULL, worker_id int);
		INSERT INTO tasks VALUES (1, 'unclaimed', NULL), (2, 'claimed', 9)`)
	db := pg.SQL()
	ctx := ctxT(t)
	tasks := versioned.MustTable("tasks")
	claim := func(db versioned.DB, id any, expect ...versioned.Pair) versioned.CASResult {
		t.Helper()
		res, err := versioned.CompareAndSwap(ctx, db, tasks, id, expect,
			versioned.Set("status", "claimed"), versioned.Set("worker_id", 7))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	before := snapshot(t, db, "tasks")
	if r := claim(db, int64(404), versioned.Eq("status", "unclaimed")); r != versioned.Missing {
		t.Fatalf("missing row: %v", r)
	}
	if r := claim(db, int64(2), versioned.Eq("status", "unclaimed")); r != versioned.Lost {
		t.Fatalf("claimed row: %v", r)
	}
	// worker_id = NULL would never match; a nil expectation means IS NULL.
	if r := claim(db, int64(2), versioned.Eq("worker_id", nil)); r != versioned.Lost {
		t.Fatalf("owned row, expecting NULL owner: %v", r)
	}
	if snapshot(t, db, "tasks") != before {
		t.Fatal("a lost or missing swap changed rows")
	}
	var noWorker *int
	if r := claim(db, int64(1), versioned.Eq("worker_id", noWorker), versioned.Eq("status", "unclaimed")); r != versioned.Won {
		t.Fatalf("unowned row, expecting NULL owner: %v", r)
	}
	if r := claim(db, int64(1), versioned.Eq("worker_id", sql.NullInt64{})); r != versioned.Lost {
		t.Fatalf("second claim: %v", r)
	}
	// Inside a transaction too.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if r := claim(tx, int64(2), versioned.Eq("worker_id", 9)); r != versioned.Won {
		t.Fatalf("in tx: %v", r)
	}
}
