// Package exclusiontest is the multi-process exclusion test that lease and
// redislock (and any other lock of the module) run on themselves: several
// OS processes — the test binary run again as workers — each run
// goroutines × n critical sections on a few lock names, and PostgreSQL
// checks that no two sections of a name overlap.
//
// A section enters by marking its name's row in the table excl as held by
// itself, only if no one holds it, and leaves by clearing the mark, only if
// it is still its own, and counting itself: an overlap makes an enter or a
// leave match no row, [ErrOverlap].
//
// A fenced lock's section ([FencedSection]) enters only if the row's last
// token is smaller than its own, taking the row over from a holder that
// outlived its lock, and leaves only if the row still has its mark and its
// token. A refusal is what fencing promises when the section's own lock had
// expired by then (its Deadline passed): the holder was fenced out and
// knows it, and the section runs again. Before the deadline, it is an
// overlap: someone else entered while the lock was trusted.
//
// The witness is the table excl in PostgreSQL ([Run]), or, for a lock
// whose test has no database, a directory of files with the same rows and
// the same statements ([RunFiles], [Files]).
//
// The parent side is [Run] or [RunFiles]; the worker side is [Child], with
// the lock's own acquire–section–release as its argument.
package exclusiontest

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
	"strconv"
	"sync"
	"testing"
	"time"
)

// The statements of a section: $1 the section's id, $2 its token, $3 (and
// in Leave $1) the row's key.
const (
	// EnterFenced marks the row held, only if its last token is smaller
	// than the section's.
	EnterFenced = `UPDATE excl SET holder = $1, last_token = $2 WHERE k = $3 AND last_token < $2`
	// LeaveFenced clears the mark, only if the row still has the section's
	// mark and token, and counts the section ($1 the key, $2 the section's
	// id, $3 its token).
	LeaveFenced = `UPDATE excl SET holder = NULL, n = n + 1 WHERE k = $1 AND holder = $2 AND last_token = $3`
	// Enter marks the row held, only if no one holds it ($1 the section's
	// id, $2 the key).
	Enter = `UPDATE excl SET holder = $1 WHERE k = $2 AND holder IS NULL`
	// Leave clears the mark, only if it is still the section's, and counts
	// the section ($1 the key, $2 the section's id).
	Leave = `UPDATE excl SET holder = NULL, n = n + 1 WHERE k = $1 AND holder = $2`
)

// ErrOverlap is a section's enter or leave that matched no row.
var ErrOverlap = errors.New("overlap: the section's row was not as a sole holder leaves it")

// Config is one run of the test.
type Config struct {
	Procs      int // worker processes
	Goroutines int // per process
	Keys       int // lock names, "excl:0" …
	N          int // sections per goroutine
	// Worker returns worker process p, not started: the test binary with
	// its role and its lock's environment. Run adds the driver's
	// environment.
	Worker func(p int) *exec.Cmd
}

// Summary is what a passing run did.
type Summary struct {
	Sections int           // in all processes
	Lost     int           // locks lost under load, and reported
	Took     time.Duration // the workers' run
}

// The driver's environment of a worker process.
const (
	envProc       = "EXCLUSIONTEST_PROC"
	envN          = "EXCLUSIONTEST_N"
	envGoroutines = "EXCLUSIONTEST_GOROUTINES"
	envKeys       = "EXCLUSIONTEST_KEYS"
)

// DB is the database a run's table lives in (a *pgtest.DB).
type DB interface {
	Exec(sql string, args ...any)
	SQL() *sql.DB
}

// Run creates the table excl on db, runs cfg.Procs workers at once, and
// fails t unless every process ran Goroutines × N sections with no overlap
// and no error, and the rows' counters add up to the sections with no row
// left held. The workers' sections run the statements above.
func Run(t *testing.T, db DB, cfg Config) Summary {
	t.Helper()
	db.Exec(`CREATE TABLE excl (k int PRIMARY KEY, holder text, last_token bigint NOT NULL DEFAULT 0, n bigint NOT NULL DEFAULT 0)`)
	db.Exec(fmt.Sprintf(`INSERT INTO excl (k) SELECT generate_series(0, %d)`, cfg.Keys-1))
	return run(t, cfg, nil, func() (int64, int, error) {
		var counted int64
		var held int
		err := db.SQL().QueryRow(`SELECT sum(n), count(holder) FROM excl`).Scan(&counted, &held)
		return counted, held, err
	})
}

// run runs the workers with env added to each, and checks their results
// and the witness's totals (the sections it counted, the keys it still has
// marked held).
func run(t *testing.T, cfg Config, env []string, totals func() (counted int64, held int, err error)) Summary {
	t.Helper()
	start := time.Now()
	type result struct {
		sections, overlaps, errs, lost int
		out                            string
	}
	results := make([]result, cfg.Procs)
	var wg sync.WaitGroup
	for p := range cfg.Procs {
		wg.Go(func() {
			cmd := cfg.Worker(p)
			cmd.Env = append(cmd.Env, env...)
			cmd.Env = append(cmd.Env, envProc+"="+strconv.Itoa(p), envN+"="+strconv.Itoa(cfg.N),
				envGoroutines+"="+strconv.Itoa(cfg.Goroutines), envKeys+"="+strconv.Itoa(cfg.Keys))
			out, err := cmd.CombinedOutput()
			res := &results[p]
			res.out = string(out)
			if err != nil {
				res.errs = -1
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				fmt.Sscanf(sc.Text(), "RESULT sections=%d overlaps=%d errors=%d lost=%d", &res.sections, &res.overlaps, &res.errs, &res.lost)
			}
		})
	}
	wg.Wait()
	var sum Summary
	sum.Took = time.Since(start)
	for p, res := range results {
		sum.Lost += res.lost
		if res.errs != 0 || res.overlaps != 0 || res.sections != cfg.Goroutines*cfg.N {
			t.Errorf("process %d: %d sections, %d overlaps, %d errors; output:\n%s", p, res.sections, res.overlaps, res.errs, res.out)
		}
		sum.Sections += res.sections
	}
	counted, held, err := totals()
	if err != nil {
		t.Fatal(err)
	}
	if counted != int64(sum.Sections) || held != 0 {
		t.Fatalf("counters sum to %d after %d sections, %d keys still marked held", counted, sum.Sections, held)
	}
	return sum
}

// Outcome is what one section's attempt came to.
type Outcome struct {
	// Err is the attempt's error: an [ErrOverlap] breaks exclusion, any
	// other error is counted as an error.
	Err error
	// Lost reports a lock lost under load, and reported to its holder
	// (only an overlap or an unreported loss breaks the promise).
	Lost bool
	// Redo asks for the section to run again: it never entered.
	Redo bool
}

// Child is a worker process's main: it runs the goroutines × n sections
// its parent asked for, each a call of section with the section's id and a
// random key, and prints the one "RESULT …" line Run reads. It returns the
// process's exit code.
func Child(section func(ctx context.Context, me string, k int) Outcome) int {
	n, _ := strconv.Atoi(os.Getenv(envN))
	goroutines, _ := strconv.Atoi(os.Getenv(envGoroutines))
	keys, _ := strconv.Atoi(os.Getenv(envKeys))
	proc := os.Getenv(envProc)
	ctx := context.Background()
	var mu sync.Mutex
	var sections, overlaps, errs, lost int
	var firstErr error
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			me := fmt.Sprintf("%s/%d", proc, g)
			for done := 0; done < n; {
				o := section(ctx, me, rand.IntN(keys))
				mu.Lock()
				if o.Lost {
					lost++
				}
				switch {
				case o.Err != nil && errors.Is(o.Err, ErrOverlap):
					overlaps++
				case o.Err != nil:
					errs++
				case !o.Redo:
					sections++
				}
				if o.Err != nil && firstErr == nil {
					firstErr = o.Err
				}
				mu.Unlock()
				if !o.Redo {
					done++
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		fmt.Println("first error:", firstErr)
	}
	fmt.Printf("RESULT sections=%d overlaps=%d errors=%d lost=%d\n", sections, overlaps, errs, lost)
	return 0
}

// Section enters with enter, works for a random time up to work, and
// leaves with leave; each must change exactly one row ([ErrOverlap]
// otherwise). It does not leave when enter failed.
func Section(enter, leave func() (rows int64, err error), work time.Duration) error {
	err := one(enter())
	if err == nil {
		time.Sleep(rand.N(work)) // the work
		err = one(leave())
	}
	return err
}

// FencedSection is Section for a lock with a fencing token (EnterFenced,
// LeaveFenced): a refused enter or leave is fencing at work, not an
// overlap, when it comes after the lock's local deadline (deadline reads
// it; renewals move it) — Outcome{Lost: true, Redo: true}.
func FencedSection(enter, leave func() (rows int64, err error), work time.Duration, deadline func() time.Time) Outcome {
	err := Section(enter, leave, work)
	if errors.Is(err, ErrOverlap) && !time.Now().Before(deadline()) {
		return Outcome{Lost: true, Redo: true}
	}
	return Outcome{Err: err}
}

func one(rows int64, err error) error {
	if err == nil && rows != 1 {
		return ErrOverlap
	}
	return err
}
