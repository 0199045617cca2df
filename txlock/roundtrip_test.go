package txlock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// A locked transaction costs the round trips of the same unlocked one on
// pgx (BEGIN carries the locks: 3 = BEGIN+locks, UPDATE, COMMIT), whatever
// the options, and on database/sql opened with txlock.OpenDB; on any other
// *sql.DB the lock is one more round trip (4). Other pgx handles, or a
// caller-given BeginQuery, also cost one more.
func TestRoundTrips(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec("CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL); INSERT INTO t SELECT g, 0 FROM generate_series(1, 10) g")
	ctx := context.Background()
	var w pgtest.Wire
	poolCfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	poolCfg.MaxConns = 1
	poolCfg.ConnConfig.DialFunc = w.Dial
	poolCfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	connCfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	connCfg.DialFunc = w.Dial
	noPing := stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false })
	plain := stdlib.OpenDB(*connCfg, noPing)
	defer plain.Close()
	fold := txlock.OpenDB(*connCfg, noPing)
	defer fold.Close()
	for _, h := range []*sql.DB{plain, fold} {
		h.SetMaxOpenConns(1)
	}

	const update = "UPDATE t SET n = n + 1 WHERE id = $1"
	key := advisory.KeyOf("rt")
	keys := []advisory.Key{advisory.KeyInt(3), advisory.KeyInt(1), advisory.KeyPair(1, 2)}
	pgxFn := func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, update, 1); return err }
	sqlFn := func(ctx context.Context, tx *sql.Tx) error { _, err := tx.ExecContext(ctx, update, 1); return err }
	pgxUnlocked := func() error {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
		if err != nil {
			return err
		}
		if err := pgxFn(ctx, tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	sqlUnlocked := func(h *sql.DB) func() error {
		return func() error {
			tx, err := h.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := sqlFn(ctx, tx); err != nil {
				return err
			}
			return tx.Commit()
		}
	}
	pgxLocked := func(opts ...txlock.Option) func() error {
		return func() error { return txlock.DoPgx(ctx, pool, key, pgxFn, opts...) }
	}
	sqlLocked := func(h *sql.DB, opts ...txlock.Option) func() error {
		return func() error { return txlock.Do(ctx, h, key, sqlFn, opts...) }
	}
	for _, tc := range []struct {
		name string
		tx   func() error
		want int
	}{
		{"pgx unlocked", pgxUnlocked, 3},
		{"pgx DoPgx", pgxLocked(), 3},
		{"pgx DoPgx shared", pgxLocked(txlock.Shared()), 3},
		{"pgx DoPgx try-once", pgxLocked(txlock.TryOnce()), 3},
		{"pgx DoPgx serializable read write", pgxLocked(txlock.WithPgxTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadWrite})), 3},
		{"pgx DoPgx 3 keys (AlsoLock)", func() error { return doPgxKeys(ctx, pool, keys, pgxFn) }, 3},
		{"pgx DoPgx own BeginQuery", pgxLocked(txlock.WithPgxTxOptions(pgx.TxOptions{BeginQuery: "BEGIN"})), 4},
		{"pgx other PgxDB", func() error { return txlock.DoPgx(ctx, wrappedPool{pool}, key, pgxFn) }, 4},
		{"database/sql unlocked", sqlUnlocked(plain), 3},
		{"database/sql Do", sqlLocked(plain), 4},
		{"database/sql Do 3 keys (AlsoLock)", func() error { return doKeys(ctx, plain, keys, sqlFn) }, 4},
		{"OpenDB unlocked", sqlUnlocked(fold), 3},
		{"OpenDB Do", sqlLocked(fold), 3},
		{"OpenDB Do serializable", sqlLocked(fold, txlock.WithTxOptions(&sqlSerializable)), 3},
		{"OpenDB Do try-once", sqlLocked(fold, txlock.TryOnce()), 3},
		{"OpenDB Do 3 keys (AlsoLock)", func() error { return doKeys(ctx, fold, keys, sqlFn) }, 3},
	} {
		// Warm up: connections dialled, UPDATE prepared and cached.
		for range 2 {
			if err := tc.tx(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		w.Reset()
		if err := tc.tx(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		turns, ready := w.Counts()
		t.Logf("%-40s %d round trips (%d ReadyForQuery)", tc.name, turns, ready)
		if turns != tc.want || ready != tc.want {
			t.Errorf("%s: %d round trips, %d ReadyForQuery; want %d", tc.name, turns, ready, tc.want)
		}
	}
	// A lock refused or timed out fails BEGIN's batch, and pgx evicts a
	// failed batch's statements from its cache: the next attempt must not
	// pay a round trip to prepare them again.
	for _, tc := range []struct {
		name string
		tx   func() error
	}{
		{"pgx DoPgx try-once", pgxLocked(txlock.TryOnce())},
		{"pgx DoPgx", pgxLocked(txlock.WithTimeout(50 * time.Millisecond))},
		{"OpenDB Do try-once", sqlLocked(fold, txlock.TryOnce())},
		{"OpenDB Do", sqlLocked(fold, txlock.WithTimeout(50*time.Millisecond))},
	} {
		h := holdLocks(t, db, false, key)
		if err := tc.tx(); !errors.Is(err, txlock.ErrTimeout) && !errors.Is(err, txlock.ErrNotAcquired) {
			t.Fatalf("%s while the key is held elsewhere: %v", tc.name, err)
		}
		h.release()
		w.Reset()
		if err := tc.tx(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		turns, ready := w.Counts()
		t.Logf("%-40s %d round trips (%d ReadyForQuery)", tc.name+", after a refusal", turns, ready)
		if turns != 3 || ready != 3 {
			t.Errorf("%s after a refusal: %d round trips, %d ReadyForQuery; want 3", tc.name, turns, ready)
		}
	}
}

// wrappedPool is a PgxDB txlock does not know: it is begun with plain
// options and locked by a statement of its own.
type wrappedPool struct{ *pgxpool.Pool }

func (p wrappedPool) BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error) {
	return p.Pool.BeginTx(ctx, o)
}
