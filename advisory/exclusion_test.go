package advisory_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

const (
	exclusionProcs      = 4
	exclusionGoroutines = 8
	// exclusionSections is N, the critical sections per goroutine:
	// 4 × 8 × 320 = 10,240 in all. ADVISORY_EXCLUSION_N overrides it.
	exclusionSections = 320
)

// exclusionKeys are the three locks, one of each key form.
var exclusionKeys = []advisory.Key{
	advisory.KeyOf("exclusion:a"), advisory.KeyInt(-77), advisory.KeyPair(7, -7),
}

// TestExclusionAcrossProcesses: 4 OS processes × 8 goroutines × N critical
// sections on 3 keys, one of each key form (see runExclusion).
func TestExclusionAcrossProcesses(t *testing.T) {
	runExclusion(t, "", len(exclusionKeys))
}

// muxKeys is how many keys TestExclusionAcrossProcessesMultiplexed draws
// from.
const muxKeys = 1000

// TestExclusionAcrossProcessesMultiplexed is TestExclusionAcrossProcesses
// with WithMultiplexing (4 shared connections of a pool of 8 per process)
// over 1,000 keys drawn at random (half the draws from 10 hot ones, so
// that sections contend): half the sections take their key with
// Do (a wait on a connection of its own, which then joins the shared set),
// half with TryLock, retried until granted (riding the shared set). 0
// overlaps, counters exact.
func TestExclusionAcrossProcessesMultiplexed(t *testing.T) {
	runExclusion(t, "mux", muxKeys)
}

// runExclusion: 4 OS processes × 8 goroutines × N critical sections on
// keys keys. Each section marks its key's row as held by itself (an UPDATE
// that only matches a row nobody holds), reads the counter, and on exit
// writes counter+1 back and clears the mark (only if the mark is still its
// own). An overlap would make an enter or exit match no row, and a lost
// update would leave the counters short.
func runExclusion(t *testing.T, mode string, keys int) {
	leakCheck(t)
	db := pgtest.New(t)
	db.Exec(`CREATE TABLE excl (k int PRIMARY KEY, holder text, n bigint NOT NULL DEFAULT 0)`)
	db.Exec(`INSERT INTO excl (k) SELECT generate_series(0, $1::int - 1)`, keys)
	n := exclusionSections
	if v, err := strconv.Atoi(os.Getenv("ADVISORY_EXCLUSION_N")); err == nil && v > 0 {
		n = v
	}
	start := time.Now()
	type result struct {
		sections, overlaps, errs int
		out                      string
	}
	results := make([]result, exclusionProcs)
	var wg sync.WaitGroup
	for p := 0; p < exclusionProcs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			backend := []string{"sql", "pgx"}[p%2]
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=exclusion", "ADVISORY_DSN="+db.DSN,
				"ADVISORY_PROC="+strconv.Itoa(p), "ADVISORY_N="+strconv.Itoa(n), "ADVISORY_BACKEND="+backend,
				"ADVISORY_MODE="+mode)
			out, err := cmd.CombinedOutput()
			r := &results[p]
			r.out = string(out)
			if err != nil {
				r.errs = -1
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				fmt.Sscanf(sc.Text(), "RESULT sections=%d overlaps=%d errors=%d", &r.sections, &r.overlaps, &r.errs)
			}
		}()
	}
	wg.Wait()
	total := 0
	for p, r := range results {
		if r.errs != 0 || r.overlaps != 0 || r.sections != exclusionGoroutines*n {
			t.Errorf("process %d: %d sections, %d overlaps, %d errors; output:\n%s", p, r.sections, r.overlaps, r.errs, r.out)
		}
		total += r.sections
	}
	ctx := context.Background()
	conn := admin(t, db)
	var sum int64
	var held int
	if err := conn.QueryRow(ctx, `SELECT sum(n), count(holder) FROM excl`).Scan(&sum, &held); err != nil {
		t.Fatal(err)
	}
	if sum != int64(total) || held != 0 {
		t.Fatalf("counters sum to %d after %d sections (lost updates?), %d rows still marked held", sum, total, held)
	}
	if total < 10000 {
		t.Fatalf("only %d sections in all; the claim needs at least 10,000", total)
	}
	waitNoLocks(t, conn)
	t.Logf("N=%d: %d processes × %d goroutines × %d sections on %d keys = %d sections, 0 overlaps, counters exact, in %v",
		n, exclusionProcs, exclusionGoroutines, n, keys, total, time.Since(start).Round(time.Millisecond))
}

// exclusionChild is the worker process body.
func exclusionChild() int {
	dsn := os.Getenv("ADVISORY_DSN")
	proc, _ := strconv.Atoi(os.Getenv("ADVISORY_PROC"))
	n, _ := strconv.Atoi(os.Getenv("ADVISORY_N"))
	ctx := context.Background()
	var l *advisory.Locker
	// Bounds no statement can reach at any speed: this test is about
	// exclusion, and beside CPU hogs a keepalive check or an unlock can wait
	// seconds for the server, which the defaults (2 s, 3 s) rightly report
	// as a lost lock — an error here, not an overlap. How loss is noticed is
	// proven under synctest (timers_internal_test.go) and in loss_test.go.
	opts := []advisory.Option{advisory.WithTimeout(2 * time.Minute),
		advisory.WithKeepalive(time.Minute), advisory.WithReleaseTimeout(time.Minute)}
	mux := os.Getenv("ADVISORY_MODE") == "mux"
	poolSize := 0 // the driver's default
	if mux {
		opts = append(opts, advisory.WithMultiplexing(4))
		poolSize = 8
	}
	switch os.Getenv("ADVISORY_BACKEND") {
	case "sql":
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			fmt.Println(err)
			return 2
		}
		db := stdlib.OpenDB(*cfg)
		defer db.Close()
		db.SetMaxOpenConns(poolSize)
		l = advisory.New(db, opts...)
	default:
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			fmt.Println(err)
			return 2
		}
		if poolSize > 0 {
			cfg.MaxConns = int32(poolSize)
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			fmt.Println(err)
			return 2
		}
		defer pool.Close()
		l = advisory.NewPool(pool, opts...)
	}
	// The critical sections write through a pool of their own.
	rec, err := sql.Open("pgx", dsn)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer rec.Close()
	var sections, overlaps, errs atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < exclusionGoroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := fmt.Sprintf("%d/%d", proc, g)
			for i := 0; i < n; i++ {
				k := (proc + g + i) % len(exclusionKeys)
				key := exclusionKeys[k]
				if mux {
					// Half the draws from 10 hot keys, so that sections
					// do contend; half over all 1,000.
					k = rand.IntN(muxKeys)
					if rand.IntN(2) == 0 {
						k %= 10
					}
					key = advisory.KeyInt(int64(k))
				}
				section := func(ctx context.Context) error {
					var cur int64
					err := rec.QueryRowContext(ctx,
						`UPDATE excl SET holder = $1 WHERE k = $2 AND holder IS NULL RETURNING n`, me, k).Scan(&cur)
					if errors.Is(err, sql.ErrNoRows) {
						overlaps.Add(1)
						fmt.Printf("OVERLAP on enter: key %d, %s found it held\n", k, me)
						return nil
					} else if err != nil {
						return err
					}
					res, err := rec.ExecContext(ctx,
						`UPDATE excl SET holder = NULL, n = $1 WHERE k = $2 AND holder = $3`, cur+1, k, me)
					if err != nil {
						return err
					}
					if m, _ := res.RowsAffected(); m != 1 {
						overlaps.Add(1)
						fmt.Printf("OVERLAP on exit: key %d, %s lost its mark\n", k, me)
					}
					return nil
				}
				var err error
				if mux && i%2 == 1 {
					err = tryUntilGranted(ctx, l, key, section)
				} else {
					err = l.Do(ctx, key, section)
				}
				if err != nil {
					errs.Add(1)
					fmt.Println("ERROR", err)
					continue
				}
				sections.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("RESULT sections=%d overlaps=%d errors=%d\n", sections.Load(), overlaps.Load(), errs.Load())
	return 0
}

// tryUntilGranted runs section under key's lock taken by TryLock, asked
// again until granted (the multiplexed exclusion test's try-once path).
func tryUntilGranted(ctx context.Context, l *advisory.Locker, key advisory.Key, section func(context.Context) error) error {
	for {
		lk, err := l.TryLock(ctx, key)
		if errors.Is(err, advisory.ErrNotAcquired) {
			runtime.Gosched()
			continue
		}
		if err != nil {
			return err
		}
		lctx, cancel := lk.Context(ctx)
		serr := section(lctx)
		cancel()
		return errors.Join(serr, lk.Release(ctx))
	}
}
