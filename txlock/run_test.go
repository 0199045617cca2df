package txlock_test

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
)

// wrapperTx stands for the transaction type of a library built on
// database/sql (sqlx's *sqlx.Tx embeds *sql.Tx the same way).
type wrapperTx struct {
	*sql.Tx
	attempt int
}

// doWrapper is the whole adapter such a library needs on top of the
// engine (as gormplugin and sqlxhelpers are).
func doWrapper(ctx context.Context, db *sql.DB, keys []advisory.Key, fn func(context.Context, *wrapperTx) error, opts ...txlock.Option) error {
	if db == nil {
		return lockedtx.ErrNilDB
	}
	key, opts := keyOpts(keys, opts)
	return lockedtx.Run(ctx, nil, key, func(ctx context.Context, a *lockedtx.Attempt) (*wrapperTx, lockedtx.Tx, bool, error) {
		tx, folded, err := lockedtx.BeginSQL(ctx, a, db.BeginTx)
		if err != nil {
			return nil, nil, false, err
		}
		return &wrapperTx{tx, a.Number()}, lockedtx.SQLTx(tx), folded, nil
	}, fn, opts)
}

// A thin adapter over the engine gets the same semantics: locks (folded into
// BEGIN on an OpenDB handle), fn's errors, retries with fresh transactions,
// timeouts.
func TestRunAdapter(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	admin := db.Pool()
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := []advisory.Key{advisory.KeyOf("b"), advisory.KeyOf("a")}
	for _, h := range []*sql.DB{db.OpenSQL(), txlock.OpenDB(*cfg)} {
		defer h.Close()
		var attempts []int
		err := doWrapper(ctx, h, keys, func(ctx context.Context, tx *wrapperTx) error {
			attempts = append(attempts, tx.attempt)
			if got, want := advisoryLocks(t, admin), expectLocks("ExclusiveLock", keys...); !reflect.DeepEqual(got, want) {
				t.Errorf("pg_locks %v, want %v", got, want)
			}
			if tx.attempt == 1 {
				_, err := tx.ExecContext(ctx, "DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40P01'; END$$")
				return err
			}
			return nil
		}, txlock.WithRetry(retry.WithBackoff(retry.Constant(0))))
		if err != nil || !reflect.DeepEqual(attempts, []int{1, 2}) {
			t.Fatalf("got %v, attempts %v", err, attempts)
		}
		if got := advisoryLocks(t, admin); len(got) != 0 {
			t.Fatalf("locks left: %v", got)
		}
		h2 := holdLocks(t, db, false, keys[1])
		err = doWrapper(ctx, h, keys, func(context.Context, *wrapperTx) error { return nil }, txlock.TryOnce())
		if !errors.Is(err, txlock.ErrNotAcquired) {
			t.Fatalf("got %v", err)
		}
		h2.release()
	}
	if err := doWrapper(ctx, nil, keys, func(context.Context, *wrapperTx) error { return nil }); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatal(err)
	}
}

// A real deadlock between two locked transactions (they hold different
// advisory keys and then update the same two rows in opposite orders)
// is retried as a whole by default: both commit, each row is incremented
// twice, and the observer saw the retry.
func TestDeadlockInsideFnRetried(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec("CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL); INSERT INTO t VALUES (1, 0), (2, 0)")
	pool := db.Pool()
	ctx := context.Background()
	var evs observetest.Recorder
	var both sync.WaitGroup // both transactions hold their first row lock
	both.Add(2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	calls := make([]int, 2)
	for i, order := range [][2]int{{1, 2}, {2, 1}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = txlock.DoPgx(ctx, pool, advisory.KeyInt(int64(10+i)), func(ctx context.Context, tx pgx.Tx) error {
				calls[i]++
				if _, err := tx.Exec(ctx, "SET LOCAL deadlock_timeout = '20ms'"); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "UPDATE t SET n = n + 1 WHERE id = $1", order[0]); err != nil {
					return err
				}
				if calls[i] == 1 {
					both.Done()
					both.Wait()
				}
				_, err := tx.Exec(ctx, "UPDATE t SET n = n + 1 WHERE id = $1", order[1])
				return err
			}, txlock.WithObserver(&evs))
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors: %v", errs)
	}
	// One deadlock makes one victim, run again. What a loaded machine can
	// add is more of the same — every retry must be for a deadlock, and
	// every run beyond the first of each must be such a retry.
	var causes []string
	for _, e := range evs.Events() {
		if e.Kind == observe.Retry {
			causes = append(causes, e.Cause)
		}
	}
	if len(causes) < 1 || calls[0]+calls[1] != 2+len(causes) {
		t.Fatalf("calls %v, retries %v: want each retry to run fn once more, and at least one", calls, causes)
	}
	for _, c := range causes {
		if c != "40P01" {
			t.Fatalf("retry causes %v: want only deadlocks (40P01)", causes)
		}
	}
	var a, b int
	if err := pool.QueryRow(ctx, "SELECT (SELECT n FROM t WHERE id = 1), (SELECT n FROM t WHERE id = 2)").Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	if a != 2 || b != 2 {
		t.Fatalf("rows %d, %d; want 2, 2", a, b)
	}
}

// Do and DoPgx on connections the caller holds: a *pgxpool.Conn, and a
// *sql.Conn (of a plain *sql.DB and of an OpenDB one).
func TestCallerHeldConnections(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	pool := db.Pool()
	ctx := context.Background()
	key := advisory.KeyOf("held-conn")
	want := expectLocks("ExclusiveLock", key)
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	err = txlock.DoPgx(ctx, pc, key, func(ctx context.Context, tx pgx.Tx) error {
		if got := advisoryLocks(t, pool); !reflect.DeepEqual(got, want) {
			t.Errorf("pg_locks %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	fold := txlock.OpenDB(*cfg)
	defer fold.Close()
	for _, h := range []*sql.DB{db.SQL(), fold} {
		conn, err := h.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = txlock.Do(ctx, conn, key, func(ctx context.Context, tx *sql.Tx) error {
			if got := advisoryLocks(t, pool); !reflect.DeepEqual(got, want) {
				t.Errorf("pg_locks %v", got)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The raw driver connection still reaches pgx.
		if err := conn.Raw(func(dc any) error {
			if _, ok := dc.(interface{ Conn() *pgx.Conn }); !ok {
				t.Errorf("%T does not expose Conn() *pgx.Conn", dc)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	if got := advisoryLocks(t, pool); len(got) != 0 {
		t.Fatalf("locks left: %v", got)
	}
}
