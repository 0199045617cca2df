package txlock_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

const optimisticSchema = `CREATE TABLE IF NOT EXISTS vcounter (id int PRIMARY KEY, n bigint NOT NULL, version bigint NOT NULL DEFAULT 1)`

var vcounter = versioned.MustTable("vcounter")

// incrementVersioned is the honest optimistic write: it re-reads the row on
// q at every attempt and writes it back guarded by the version it read.
func incrementVersioned(ctx context.Context, q txlock.Querier, id int) error {
	var n, v int64
	if err := q.QueryRowContext(ctx, "SELECT n, version FROM vcounter WHERE id = $1", id).Scan(&n, &v); err != nil {
		return err
	}
	_, err := versioned.Update(ctx, q, vcounter, id, v, versioned.Set("n", n+1))
	return err
}

// lockCounter counts the lock acquisitions and retries a call reports.
type lockCounter struct{ acquired, retries atomic.Int64 }

func (c *lockCounter) Observe(_ context.Context, e observe.Event) {
	switch {
	case e.Kind == observe.LockAcquire && e.Outcome == observe.Acquired:
		c.acquired.Add(1)
	case e.Kind == observe.Retry:
		c.retries.Add(1)
	}
}

func vcount(t *testing.T, db *sql.DB, id int) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow("SELECT n FROM vcounter WHERE id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// No lost update with many goroutines: 32 goroutines × 100 re-reading,
// version-guarded increments of one row through DoOptimistic give exactly
// 3,200, on pgx's database/sql driver, txlock.OpenDB and lib/pq; the
// conflicts were retried under the lock (one acquisition per retry).
func TestDoOptimisticNoLostUpdate(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec(optimisticSchema)
	ctx := context.Background()
	for i, name := range []string{beSQL, beFold, bePQ} {
		t.Run(name, func(t *testing.T) {
			h := sqlHandle(t, db, name)
			h.SetMaxOpenConns(16)
			h.SetMaxIdleConns(16)
			id := i + 1
			db.Exec("INSERT INTO vcounter (id, n) VALUES ($1, 0)", id)
			key := advisory.KeyPair(2, int32(id))
			var c lockCounter
			run(t, 32, 100, func() error {
				return txlock.DoOptimistic(ctx, h, key, func(ctx context.Context, q txlock.Querier) error {
					return incrementVersioned(ctx, q, id)
				}, txlock.WithObserver(&c), txlock.WithRetry(retry.WithMaxAttempts(1000)))
			})
			if n := vcount(t, db.SQL(), id); n != 32*100 {
				t.Fatalf("counter = %d, want %d", n, 32*100)
			}
			if c.acquired.Load() == 0 || c.acquired.Load() > c.retries.Load()+32*100 {
				t.Fatalf("%d lock acquisitions for %d retries", c.acquired.Load(), c.retries.Load())
			}
			t.Logf("%s: 3200 increments, %d retries, %d locked attempts", name, c.retries.Load(), c.acquired.Load())
		})
	}
}

// sqlHandle opens one database/sql handle of the named kind on db.
func sqlHandle(t *testing.T, db *pgtest.DB, name string) *sql.DB {
	t.Helper()
	var h *sql.DB
	var err error
	switch name {
	case beSQL:
		h, err = sql.Open("pgx", db.DSN)
	case beFold:
		h, err = optimisticOpenDB(db.DSN)
	case bePQ:
		h, err = sql.Open("postgres", db.DSN)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

const optimisticChildEnv = "SQLOCK_TXLOCK_OPTIMISTIC_CHILD"

// optimisticChild is a re-executed test binary: workers goroutines each do
// each increments of row 1 through DoOptimistic, then it prints its retry
// count.
func optimisticChild(spec string) int {
	var dsn string
	var workers, each int
	if _, err := fmt.Sscanf(spec, "%d %d %s", &workers, &each, &dsn); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	db, err := optimisticOpenDB(dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var c lockCounter
	var wg sync.WaitGroup
	var failed atomic.Bool
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := txlock.DoOptimistic(ctx, db, advisory.KeyPair(2, 1), func(ctx context.Context, q txlock.Querier) error {
					return incrementVersioned(ctx, q, 1)
				}, txlock.WithObserver(&c), txlock.WithRetry(retry.WithMaxAttempts(1000)))
				if err != nil {
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
	fmt.Printf("retries %d locked %d\n", c.retries.Load(), c.acquired.Load())
	return 0
}

// No lost update across OS processes: 4 re-executed test binaries × 8
// goroutines × 60 increments of one row through DoOptimistic, each process
// with its own pool, give exactly 1,920.
func TestDoOptimisticNoLostUpdateProcesses(t *testing.T) {
	const procs, workers, each = 4, 8, 60
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec(optimisticSchema)
	db.Exec("INSERT INTO vcounter (id, n) VALUES (1, 0)")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	outs := make(chan error, procs)
	var mu sync.Mutex
	var report []string
	for range procs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s", optimisticChildEnv, workers, each, db.DSN))
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
			sc := bufio.NewScanner(stdout)
			got := false
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "retries ") {
					got = true
					mu.Lock()
					report = append(report, sc.Text())
					mu.Unlock()
				}
			}
			err := cmd.Wait()
			if err == nil && !got {
				err = errors.New("no report")
			}
			if err != nil {
				err = fmt.Errorf("child: %v\n%s", err, stderr.String())
			}
			outs <- err
		}()
	}
	for range procs {
		if err := <-outs; err != nil {
			t.Fatal(err)
		}
	}
	if n := vcount(t, db.SQL(), 1); n != procs*workers*each {
		t.Fatalf("counter = %d, want %d", n, procs*workers*each)
	}
	t.Logf("%d processes × %d goroutines × %d = %d increments; per process: %s", procs, workers, each, procs*workers*each, strings.Join(report, "; "))
}

// The lock is taken only after a conflict: a call with no conflict runs
// once on the *sql.DB itself, with no transaction and no advisory lock
// anywhere on the server, and acquires nothing; a call whose first attempt
// goes stale retries once, in a transaction whose own backend holds the
// key's lock (pg_locks), acquired once; the next call with no conflict is
// lock-free again.
func TestDoOptimisticLocksOnlyAfterConflict(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec(optimisticSchema)
	db.Exec("INSERT INTO vcounter (id, n) VALUES (1, 0)")
	admin := db.Pool()
	ctx := context.Background()
	for _, name := range []string{beSQL, beFold, bePQ} {
		t.Run(name, func(t *testing.T) {
			h := sqlHandle(t, db, name)
			key := advisory.KeyOf("optimistic:only-after-conflict:" + name)
			c, o, _ := key.Locktag()
			type seen struct {
				tx       bool
				ownLocks int64 // advisory locks on key held by q's backend
				anyLocks int64 // advisory locks on key held by anyone
			}
			call := func(conflict bool) (*lockCounter, []seen) {
				var cnt lockCounter
				var attempts []seen
				err := txlock.DoOptimistic(ctx, h, key, func(ctx context.Context, q txlock.Querier) error {
					var s seen
					_, s.tx = q.(*sql.Tx)
					const locks = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
						AND classid::int8 = $1 AND objid::int8 = $2`
					if err := q.QueryRowContext(ctx, locks+" AND pid = pg_backend_pid()", int64(c), int64(o)).Scan(&s.ownLocks); err != nil {
						return err
					}
					if err := admin.QueryRow(ctx, locks, int64(c), int64(o)).Scan(&s.anyLocks); err != nil {
						return err
					}
					attempts = append(attempts, s)
					if conflict && len(attempts) == 1 {
						// Another writer moves the row between this
						// attempt's read and its write.
						var v int64
						if err := q.QueryRowContext(ctx, "SELECT version FROM vcounter WHERE id = 1").Scan(&v); err != nil {
							return err
						}
						db.Exec("UPDATE vcounter SET n = n + 1, version = version + 1 WHERE id = 1")
						_, err := versioned.Update(ctx, q, vcounter, 1, v, versioned.Set("n", 0))
						return err
					}
					return incrementVersioned(ctx, q, 1)
				}, txlock.WithObserver(&cnt))
				if err != nil {
					t.Fatal(err)
				}
				return &cnt, attempts
			}
			if cnt, at := call(false); len(at) != 1 || at[0] != (seen{}) || cnt.acquired.Load() != 0 {
				t.Fatalf("no conflict: attempts %+v, %d acquisitions; want one lock-free attempt", at, cnt.acquired.Load())
			}
			cnt, at := call(true)
			if len(at) != 2 || at[0] != (seen{}) || at[1] != (seen{tx: true, ownLocks: 1, anyLocks: 1}) ||
				cnt.acquired.Load() != 1 || cnt.retries.Load() != 1 {
				t.Fatalf("one conflict: attempts %+v, %d acquisitions, %d retries; want a lock-free attempt, then one holding the lock",
					at, cnt.acquired.Load(), cnt.retries.Load())
			}
			if cnt, at := call(false); len(at) != 1 || at[0] != (seen{}) || cnt.acquired.Load() != 0 {
				t.Fatalf("after the conflict: attempts %+v, %d acquisitions; want one lock-free attempt", at, cnt.acquired.Load())
			}
			waitNoLocks(t, admin)
		})
	}
}

// A different key's writers are not serialised: while another transaction
// holds key A's lock, a DoOptimistic call on A whose first attempt went
// stale waits for it (pg_locks shows it waiting), and a call on key B whose
// first attempt went stale too takes B's lock and finishes meanwhile.
func TestDoOptimisticDoesNotSerialiseOtherKeys(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec(optimisticSchema)
	db.Exec("INSERT INTO vcounter (id, n) VALUES (1, 0), (2, 0)")
	admin := db.Pool()
	h := sqlHandle(t, db, beFold)
	ctx := context.Background()
	keyA, keyB := advisory.KeyPair(3, 1), advisory.KeyPair(3, 2)
	// staleOnce fails its first attempt as a stale write would, then
	// increments row id.
	staleOnce := func(id int) func(context.Context, txlock.Querier) error {
		first := true
		return func(ctx context.Context, q txlock.Querier) error {
			if first {
				first = false
				return versioned.ErrStale
			}
			return incrementVersioned(ctx, q, id)
		}
	}
	holder := holdLocks(t, db, false, keyA)
	doneA := make(chan error, 1)
	go func() { doneA <- txlock.DoOptimistic(ctx, h, keyA, staleOnce(1)) }()
	waitForWaiter(t, admin, keyA)
	if err := txlock.DoOptimistic(ctx, h, keyB, staleOnce(2)); err != nil {
		t.Fatal(err)
	}
	if n := vcount(t, db.SQL(), 2); n != 1 {
		t.Fatalf("row 2 = %d, want 1", n)
	}
	select {
	case err := <-doneA:
		t.Fatalf("the call on key A finished while A was held: %v", err)
	default:
	}
	holder.release()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if n := vcount(t, db.SQL(), 1); n != 1 {
		t.Fatalf("row 1 = %d, want 1", n)
	}
}

// waitForWaiter waits until a backend waits for key's lock.
func waitForWaiter(t *testing.T, admin *pgxpool.Pool, key advisory.Key) {
	t.Helper()
	waitForWaiters(t, admin, key, 1)
}

// waitForWaiters waits until n backends wait for key's lock.
func waitForWaiters(t *testing.T, admin *pgxpool.Pool, key advisory.Key, want int) {
	t.Helper()
	c, o, s := key.Locktag()
	for {
		var n int
		if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND NOT granted AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = $3`, int64(c), int64(o), int16(s)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= want {
			return
		}
		if dl, ok := t.Deadline(); ok && time.Until(dl) < 5*time.Second {
			t.Fatalf("%d backends wait for the lock, want %d", n, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// While a call sharing a HotKeys is queued for a key's lock (it
// conflicted, and its retry waits for the lock), a new call's first attempt
// takes the lock at once instead of barging past it unlocked: with the lock
// held elsewhere and one conflicted call queued for it, a second call
// queues too before fn has run at all (pg_locks shows 2 waiters), then runs
// fn once, in the locked transaction. With none queued (the lock held by
// someone else only), a new call's first attempt is lock-free, and so is,
// with one queued, the first attempt of a call without WithHotKeys. Once
// the queue has drained, calls are lock-free again.
func TestDoOptimisticQueuesNewCallsWhileKeyIsHot(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec(optimisticSchema)
	db.Exec("INSERT INTO vcounter (id, n) VALUES (1, 0)")
	admin := db.Pool()
	h := sqlHandle(t, db, beFold)
	h.SetMaxOpenConns(40)
	ctx := context.Background()
	key := advisory.KeyOf("optimistic:hot")
	var hot txlock.HotKeys
	type attempt struct{ tx bool }
	// probe is a call whose every attempt is recorded.
	probe := func(attempts *[]attempt, cnt *lockCounter, opts ...txlock.Option) error {
		return txlock.DoOptimistic(ctx, h, key, func(ctx context.Context, q txlock.Querier) error {
			_, tx := q.(*sql.Tx)
			*attempts = append(*attempts, attempt{tx})
			return incrementVersioned(ctx, q, 1)
		}, append(opts, txlock.WithObserver(cnt))...)
	}
	staleFirst := func() func(context.Context, txlock.Querier) error {
		first := true
		return func(ctx context.Context, q txlock.Querier) error {
			if first {
				first = false
				return versioned.ErrStale
			}
			return incrementVersioned(ctx, q, 1)
		}
	}
	holder := holdLocks(t, db, false, key)
	done := make(chan error, 2)
	var at []attempt
	var cnt lockCounter
	if err := probe(&at, &cnt, txlock.WithHotKeys(&hot)); err != nil { // none queued: not hot
		t.Fatal(err)
	}
	if len(at) != 1 || at[0].tx || cnt.acquired.Load() != 0 {
		t.Fatalf("none queued: attempts %+v, %d acquisitions; want one lock-free attempt", at, cnt.acquired.Load())
	}
	go func() { done <- txlock.DoOptimistic(ctx, h, key, staleFirst(), txlock.WithHotKeys(&hot)) }()
	waitForWaiters(t, admin, key, 1)
	at, cnt = nil, lockCounter{}
	if err := probe(&at, &cnt); err != nil { // no WithHotKeys: the queue is not seen
		t.Fatal(err)
	}
	if len(at) != 1 || at[0].tx || cnt.acquired.Load() != 0 {
		t.Fatalf("one queued, a call without WithHotKeys: attempts %+v, %d acquisitions; want one lock-free attempt", at, cnt.acquired.Load())
	}
	at, cnt = nil, lockCounter{}
	go func() { done <- probe(&at, &cnt, txlock.WithHotKeys(&hot)) }()
	waitForWaiters(t, admin, key, 2)
	holder.release()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if len(at) != 1 || !at[0].tx || cnt.acquired.Load() != 1 || cnt.retries.Load() != 0 {
		t.Fatalf("one queued: attempts %+v, %d acquisitions, %d retries; want one attempt, locked at once", at, cnt.acquired.Load(), cnt.retries.Load())
	}
	at, cnt = nil, lockCounter{}
	if err := probe(&at, &cnt, txlock.WithHotKeys(&hot)); err != nil {
		t.Fatal(err)
	}
	if len(at) != 1 || at[0].tx || cnt.acquired.Load() != 0 {
		t.Fatalf("queue drained: attempts %+v, %d acquisitions; want one lock-free attempt", at, cnt.acquired.Load())
	}
	if n := vcount(t, db.SQL(), 1); n != 5 {
		t.Fatalf("row = %d, want 5", n)
	}
}

// A crowd of calls that starts on a cold key at once runs at most four
// lock-free first attempts together: the others queue for the lock at
// once, rather than all reading the same version and all but one
// conflicting. Without WithHotKeys every first attempt is lock-free. The
// lock-free attempts are held inside fn until every call has entered it,
// so the count is exact at any speed; the row ends with every increment.
func TestDoOptimisticCrowdOnAColdKeyRunsFourLockFree(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec(optimisticSchema)
	db.Exec("INSERT INTO vcounter (id, n) VALUES (1, 0)")
	h := sqlHandle(t, db, beFold)
	h.SetMaxOpenConns(40)
	ctx := context.Background()
	key := advisory.KeyOf("optimistic:crowd")
	const calls = 16
	crowd := func(opts ...txlock.Option) (lockFree, locked int) {
		t.Helper()
		var entered sync.WaitGroup
		entered.Add(calls)
		release := make(chan struct{})
		var mu sync.Mutex
		errs := make(chan error, calls)
		for range calls {
			go func() {
				first := true
				errs <- txlock.DoOptimistic(ctx, h, key, func(ctx context.Context, q txlock.Querier) error {
					if first {
						first = false
						_, tx := q.(*sql.Tx)
						mu.Lock()
						if tx {
							locked++
						} else {
							lockFree++
						}
						mu.Unlock()
						entered.Done()
						if !tx {
							<-release
						}
					}
					return incrementVersioned(ctx, q, 1)
				}, append(opts, txlock.WithRetry(retry.WithMaxAttempts(calls+1)))...)
			}()
		}
		// Locked calls end before the release; a call that fails before
		// entering fn fails the test rather than leaving it waiting.
		allEntered := make(chan struct{})
		go func() { entered.Wait(); close(allEntered) }()
		ended := 0
		for waiting := true; waiting; {
			select {
			case <-allEntered:
				waiting = false
			case err := <-errs:
				ended++
				if err != nil {
					close(release)
					t.Fatal(err)
				}
			}
		}
		close(release)
		for ; ended < calls; ended++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		return lockFree, locked
	}
	var hot txlock.HotKeys
	if free, locked := crowd(txlock.WithHotKeys(&hot)); free != 4 || locked != calls-4 {
		t.Fatalf("with WithHotKeys: %d first attempts lock-free, %d locked; want 4 and %d", free, locked, calls-4)
	}
	if free, locked := crowd(); free != calls || locked != 0 {
		t.Fatalf("without WithHotKeys: %d first attempts lock-free, %d locked; want %d and 0", free, locked, calls)
	}
	if n := vcount(t, db.SQL(), 1); n != 2*calls {
		t.Fatalf("row = %d, want %d", n, 2*calls)
	}
}

// Bad input is refused before fn runs, with the typed errors Do uses, and
// the options that would defeat the point (no retry, a shared lock, a lock
// that does not wait) are invalid options.
func TestDoOptimisticBadInput(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	h := sqlHandle(t, db, beFold)
	ctx := context.Background()
	ran := false
	fn := func(context.Context, txlock.Querier) error { ran = true; return nil }
	key := advisory.KeyOf("k")
	var nilDB *sql.DB
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"nil handle", txlock.DoOptimistic(ctx, nilDB, key, fn), sqlock.ErrNilHandle},
		{"nil fn", txlock.DoOptimistic(ctx, h, key, nil), sqlock.ErrNilHandle},
		{"invalid key", txlock.DoOptimistic(ctx, h, advisory.Key{}, fn), advisory.ErrInvalidKey},
		{"zero timeout", txlock.DoOptimistic(ctx, h, key, fn, txlock.WithTimeout(0)), sqlock.ErrInvalidOption},
		{"WithoutRetry", txlock.DoOptimistic(ctx, h, key, fn, txlock.WithoutRetry()), sqlock.ErrInvalidOption},
		{"Shared", txlock.DoOptimistic(ctx, h, key, fn, txlock.Shared()), sqlock.ErrInvalidOption},
		{"TryOnce", txlock.DoOptimistic(ctx, h, key, fn, txlock.TryOnce()), sqlock.ErrInvalidOption},
		{"nil HotKeys", txlock.DoOptimistic(ctx, h, key, fn, txlock.WithHotKeys(nil)), sqlock.ErrInvalidOption},
		{"WithHotKeys on Do", txlock.Do(ctx, h, key, func(context.Context, *sql.Tx) error { ran = true; return nil },
			txlock.WithHotKeys(new(txlock.HotKeys))), sqlock.ErrInvalidOption},
		{"bad retry option", txlock.DoOptimistic(ctx, h, key, fn, txlock.WithRetry(retry.WithMaxAttempts(0))), sqlock.ErrInvalidOption},
	} {
		if !errors.Is(tc.err, tc.want) || ran {
			t.Errorf("%s: %v (fn ran: %v), want %v", tc.name, tc.err, ran, tc.want)
		}
	}
	// The handle was never used.
	if s := h.Stats(); s.OpenConnections != 0 {
		t.Errorf("%d connections opened by refused calls", s.OpenConnections)
	}
}

func init() {
	if spec := os.Getenv(optimisticChildEnv); spec != "" {
		os.Exit(optimisticChild(spec))
	}
}

// optimisticOpenDB is txlock.OpenDB on a DSN.
func optimisticOpenDB(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return txlock.OpenDB(*cfg), nil
}
