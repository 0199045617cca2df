// Package contention is the hot-row contention driver behind make
// bench-report: many workers increment one row by read-then-write under each
// of sqlock's mechanisms and under PostgreSQL's native SELECT … FOR UPDATE,
// and it reports throughput and latency percentiles for each. Correctness is
// checked on every run: the row must equal the number of successful
// increments.
package contention

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

// Mode is one way of making the increment safe.
type Mode string

const (
	ForUpdate   Mode = "SELECT … FOR UPDATE"
	TxLock      Mode = "txlock"
	SessionLock Mode = "session lock"
	Optimistic  Mode = "optimistic+retry"
	// Hybrid is optimistic+retry whose retries after a conflict take the
	// key's transaction lock (txlock.DoOptimistic), on a database/sql pool
	// as Optimistic's, with the lock folded into BEGIN (txlock.WrapConnector).
	Hybrid Mode = "optimistic→txlock"
	// TxLockSQL is TxLock on Hybrid's handle (txlock.Do on a database/sql
	// pool with the lock folded into BEGIN): what Hybrid's locked attempts
	// cost, apart from the handle.
	TxLockSQL Mode = "txlock (database/sql)"
	// HandLock is the hand-written form txlock is measured against: a
	// transaction whose first statement is SELECT pg_advisory_xact_lock($1).
	HandLock Mode = "hand-written xact lock"
)

// Modes lists the modes of the bench-report sweep, the baseline first.
var Modes = []Mode{ForUpdate, TxLock, SessionLock, Optimistic, Hybrid}

// Result is one (mode, workers) measurement.
type Result struct {
	Mode       Mode
	Workers    int
	Successes  int
	Retries    int
	Locked     int // lock acquisitions (Hybrid: the attempts after a conflict)
	Elapsed    time.Duration
	Throughput float64 // successful increments per second
	P50, P99   time.Duration
	// Latencies are every increment's, sorted, for callers that pool
	// several runs.
	Latencies []time.Duration
}

const setup = `DROP TABLE IF EXISTS hot;
CREATE TABLE hot (id int PRIMARY KEY, n bigint NOT NULL, version bigint NOT NULL DEFAULT 1);
INSERT INTO hot (id, n) VALUES (1, 0);`

// Run measures one mode with workers goroutines, each doing perWorker
// increments, on the database dsn names. Before the clock starts, each
// worker does one increment, so that every connection is open and its
// statements prepared. Latency runs from an increment's first attempt to
// its success, retries and backoff included.
func Run(ctx context.Context, dsn string, mode Mode, workers, perWorker int) (Result, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return Result{}, err
	}
	// A session lock pins one connection and its holder uses another.
	cfg.MaxConns = int32(2*workers + 2)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, setup); err != nil {
		return Result{}, err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	folding := sql.OpenDB(txlock.WrapConnector(stdlib.GetPoolConnector(pool)))
	defer folding.Close()
	// database/sql keeps 2 idle connections unless told: with more workers,
	// every transaction would hand its connection back to the pool and the
	// next one take it out again.
	for _, h := range []*sql.DB{db, folding} {
		h.SetMaxIdleConns(workers)
	}

	retries := &retryCounter{}
	key := advisory.KeyOf("contention:hot-1")
	locker := advisory.NewPool(pool, advisory.WithTimeout(time.Minute))
	table := versioned.MustTable("hot")
	var increment func(ctx context.Context) error
	switch mode {
	case ForUpdate:
		increment = func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return incrementTx(ctx, tx, " FOR UPDATE") })
		}
	case TxLock:
		increment = func(ctx context.Context) error {
			return txlock.DoPgx(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
				return incrementTx(ctx, tx, "")
			}, txlock.WithTimeout(time.Minute))
		}
	case SessionLock:
		increment = func(ctx context.Context) error {
			return locker.Do(ctx, key, func(ctx context.Context) error {
				var n int64
				if err := pool.QueryRow(ctx, "SELECT n FROM hot WHERE id = 1").Scan(&n); err != nil {
					return err
				}
				_, err := pool.Exec(ctx, "UPDATE hot SET n = $1 WHERE id = 1", n+1)
				return err
			})
		}
	case HandLock:
		increment = func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				n, _ := key.Int64()
				if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", n); err != nil {
					return err
				}
				return incrementTx(ctx, tx, "")
			})
		}
	case Optimistic:
		policy := retry.New(retry.WithMaxAttempts(10_000), retry.WithObserver(retries))
		increment = func(ctx context.Context) error {
			return policy.Do(ctx, func(ctx context.Context) error {
				var n, v int64
				if err := db.QueryRowContext(ctx, "SELECT n, version FROM hot WHERE id = 1").Scan(&n, &v); err != nil {
					return err
				}
				_, err := versioned.Update(ctx, db, table, 1, v, versioned.Set("n", n+1))
				return err
			})
		}
	case TxLockSQL:
		increment = func(ctx context.Context) error {
			return txlock.Do(ctx, folding, key, func(ctx context.Context, tx *sql.Tx) error {
				var n, v int64
				if err := tx.QueryRowContext(ctx, "SELECT n, version FROM hot WHERE id = 1").Scan(&n, &v); err != nil {
					return err
				}
				_, err := versioned.Update(ctx, tx, table, 1, v, versioned.Set("n", n+1))
				return err
			}, txlock.WithTimeout(time.Minute))
		}
	case Hybrid:
		var hot txlock.HotKeys // the run's workers share one handle, and so its HotKeys
		opts := []txlock.Option{txlock.WithTimeout(time.Minute), txlock.WithObserver(retries),
			txlock.WithRetry(retry.WithMaxAttempts(10_000)), txlock.WithHotKeys(&hot)}
		increment = func(ctx context.Context) error {
			return txlock.DoOptimistic(ctx, folding, key, func(ctx context.Context, q txlock.Querier) error {
				var n, v int64
				if err := q.QueryRowContext(ctx, "SELECT n, version FROM hot WHERE id = 1").Scan(&n, &v); err != nil {
					return err
				}
				_, err := versioned.Update(ctx, q, table, 1, v, versioned.Set("n", n+1))
				return err
			}, opts...)
		}
	default:
		return Result{}, fmt.Errorf("contention: unknown mode %q", mode)
	}

	if _, _, err := work(ctx, workers, 1, increment); err != nil { // warm-up
		return Result{}, fmt.Errorf("%s with %d workers: warm-up: %w", mode, workers, err)
	}
	warm, warmLocked := retries.n(), retries.locks()
	lat, elapsed, err := work(ctx, workers, perWorker, increment)
	if err != nil {
		return Result{}, fmt.Errorf("%s with %d workers: %w", mode, workers, err)
	}
	var n int64
	if err := pool.QueryRow(ctx, "SELECT n FROM hot WHERE id = 1").Scan(&n); err != nil {
		return Result{}, err
	}
	if n != int64(workers+len(lat)) {
		return Result{}, fmt.Errorf("%s with %d workers: row = %d after %d increments: lost updates", mode, workers, n, workers+len(lat))
	}
	return Result{
		Mode: mode, Workers: workers, Successes: len(lat), Retries: retries.n() - warm, Locked: retries.locks() - warmLocked, Elapsed: elapsed,
		Throughput: float64(len(lat)) / elapsed.Seconds(),
		P50:        lat[len(lat)/2], P99: lat[len(lat)*99/100],
		Latencies: lat,
	}, nil
}

// work runs perWorker increments in each of workers goroutines and returns
// their latencies, sorted, and the time they all took.
func work(ctx context.Context, workers, perWorker int, increment func(context.Context) error) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, 0, workers*perWorker)
	var mu sync.Mutex
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, perWorker)
			for range perWorker {
				t0 := time.Now()
				if err := increment(ctx); err != nil {
					errs <- err
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := errors.Join(drain(errs)...); err != nil {
		return nil, 0, err
	}
	slices.Sort(lat)
	return lat, elapsed, nil
}

func incrementTx(ctx context.Context, tx pgx.Tx, suffix string) error {
	var n int64
	if err := tx.QueryRow(ctx, "SELECT n FROM hot WHERE id = 1"+suffix).Scan(&n); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "UPDATE hot SET n = $1 WHERE id = 1", n+1)
	return err
}

func drain(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

// retryCounter counts retries and lock acquisitions.
type retryCounter struct {
	mu            sync.Mutex
	count, locked int
}

func (r *retryCounter) Observe(_ context.Context, e observe.Event) {
	switch {
	case e.Kind == observe.Retry:
		r.mu.Lock()
		r.count++
		r.mu.Unlock()
	case e.Kind == observe.LockAcquire && e.Outcome == observe.Acquired:
		r.mu.Lock()
		r.locked++
		r.mu.Unlock()
	}
}

func (r *retryCounter) locks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.locked
}

func (r *retryCounter) n() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}
