package txlock_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
)

// Bad input is refused with a typed error before anything is sent: no
// connection is even dialled.
func TestBadInput(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	var dials atomic.Int64
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	sqlDB := stdlib.OpenDB(*cfg)
	defer sqlDB.Close()
	poolCfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	poolCfg.ConnConfig.DialFunc = cfg.DialFunc
	poolCfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(context.Background(), poolCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	ran := false
	sqlFn := func(context.Context, *sql.Tx) error { ran = true; return nil }
	pgxFn := func(context.Context, pgx.Tx) error { ran = true; return nil }
	key := advisory.KeyOf("k")
	ctx := context.Background()
	var nilDB *sql.DB
	var nilPool *pgxpool.Pool
	var nilConn *pgx.Conn
	for _, tc := range []struct {
		name string
		err  error
		call func() error
	}{
		{"sql nil interface", sqlock.ErrNilHandle, func() error { return txlock.Do(ctx, nil, key, sqlFn) }},
		{"sql typed nil", sqlock.ErrNilHandle, func() error { return txlock.Do(ctx, nilDB, key, sqlFn) }},
		{"sql nil fn", sqlock.ErrNilHandle, func() error { return txlock.Do(ctx, sqlDB, key, nil) }},
		{"sql zero key", advisory.ErrInvalidKey, func() error { return txlock.Do(ctx, sqlDB, advisory.Key{}, sqlFn) }},
		{"sql empty string key", advisory.ErrInvalidKey, func() error { return txlock.Do(ctx, sqlDB, advisory.KeyOf(""), sqlFn) }},
		{"sql one bad key of two", advisory.ErrInvalidKey, func() error {
			return doKeys(ctx, sqlDB, []advisory.Key{key, {}}, sqlFn)
		}},
		{"pgx nil interface", sqlock.ErrNilHandle, func() error { return txlock.DoPgx(ctx, nil, key, pgxFn) }},
		{"pgx nil pool", sqlock.ErrNilHandle, func() error { return txlock.DoPgx(ctx, nilPool, key, pgxFn) }},
		{"pgx nil conn", sqlock.ErrNilHandle, func() error { return txlock.DoPgx(ctx, nilConn, key, pgxFn) }},
		{"pgx nil fn", sqlock.ErrNilHandle, func() error { return txlock.DoPgx(ctx, pool, key, nil) }},
		{"pgx zero key among AlsoLock's", advisory.ErrInvalidKey, func() error {
			return txlock.DoPgx(ctx, pool, key, pgxFn, txlock.AlsoLock(advisory.KeyInt(3), advisory.Key{}))
		}},
		{"pgx zero key", advisory.ErrInvalidKey, func() error { return txlock.DoPgx(ctx, pool, advisory.Key{}, pgxFn) }},
		{"pgx bad isolation", sqlock.ErrInvalidOption, func() error {
			return txlock.DoPgx(ctx, pool, key, pgxFn, txlock.WithPgxTxOptions(pgx.TxOptions{IsoLevel: "serializable; DROP TABLE t"}))
		}},
		// A timeout must be positive, as every timeout option of the
		// library: zero and negative are refused, never "wait forever".
		{"sql zero timeout", sqlock.ErrInvalidOption, func() error { return txlock.Do(ctx, sqlDB, key, sqlFn, txlock.WithTimeout(0)) }},
		{"sql negative timeout", sqlock.ErrInvalidOption, func() error {
			return txlock.Do(ctx, sqlDB, key, sqlFn, txlock.WithTimeout(-time.Second))
		}},
		{"pgx zero timeout", sqlock.ErrInvalidOption, func() error { return txlock.DoPgx(ctx, pool, key, pgxFn, txlock.WithTimeout(0)) }},
		{"pgx negative timeout with TryOnce", sqlock.ErrInvalidOption, func() error {
			return txlock.DoPgx(ctx, pool, key, pgxFn, txlock.WithTimeout(-1), txlock.TryOnce())
		}},
		{"engine nil begin", sqlock.ErrNilHandle, func() error {
			return lockedtx.Run[int, txlock.Option](ctx, nil, key, nil, func(context.Context, int) error { return nil }, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			if tc.err == advisory.ErrInvalidKey && !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Fatalf("got %v, want it to match sqlock.ErrInvalidArgument too", err)
			}
			if ran {
				t.Fatal("fn ran")
			}
		})
	}
	if n := dials.Load(); n != 0 {
		t.Fatalf("%d connections dialled for refused input", n)
	}
}

// While fn runs, pg_locks shows exactly the locks asked for — right
// classid/objid/objsubid and mode — and after COMMIT, ROLLBACK and a panic
// none is left.
func TestLocksVisibleAndReleased(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	admin := db.Pool()
	db.Exec("CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL); INSERT INTO t VALUES (1, 0)")
	ctx := context.Background()
	keySets := map[string][]advisory.Key{
		"string":      {advisory.KeyOf("booking:seat-42")},
		"hashtext":    {advisory.KeyText("booking:seat-42")},
		"min int64":   {advisory.KeyInt(math.MinInt64)},
		"max int64":   {advisory.KeyInt(math.MaxInt64)},
		"pair":        {advisory.KeyPair(math.MinInt32, math.MaxInt32)},
		"several+dup": {advisory.KeyInt(3), advisory.KeyPair(0, 3), advisory.KeyInt(-1), advisory.KeyInt(3), advisory.KeyOf("x")},
	}
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			for name, keys := range keySets {
				for _, shared := range []bool{false, true} {
					mode, opts := "ExclusiveLock", []txlock.Option(nil)
					if shared {
						mode, opts = "ShareLock", []txlock.Option{txlock.Shared()}
					}
					want := expectLocks(mode, uniq(keys)...)
					inside := func(ctx context.Context, tx q) error {
						if got := advisoryLocks(t, admin); !reflect.DeepEqual(got, want) {
							t.Errorf("%s: pg_locks inside fn = %v, want %v", name, got, want)
						}
						return tx.Exec(ctx, "UPDATE t SET n = n + 1 WHERE id = 1")
					}
					// COMMIT
					if err := be.do(ctx, keys, inside, opts...); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if got := advisoryLocks(t, admin); len(got) != 0 {
						t.Fatalf("%s: after COMMIT: %v", name, got)
					}
					// ROLLBACK: fn's error comes back as it was returned.
					err := be.do(ctx, keys, func(ctx context.Context, tx q) error {
						_ = inside(ctx, tx)
						return errBoom
					}, opts...)
					if err != errBoom {
						t.Fatalf("%s: fn error came back as %v", name, err)
					}
					if got := advisoryLocks(t, admin); len(got) != 0 {
						t.Fatalf("%s: after ROLLBACK: %v", name, got)
					}
					// panic: rolled back, re-panicked with the same value.
					func() {
						defer func() {
							if r := recover(); r != errBoom {
								t.Fatalf("%s: recovered %v, want the original panic value", name, r)
							}
						}()
						_ = be.do(ctx, keys, func(ctx context.Context, tx q) error {
							_ = inside(ctx, tx)
							panic(errBoom)
						}, opts...)
					}()
					if got := advisoryLocks(t, admin); len(got) != 0 {
						t.Fatalf("%s: after panic: %v", name, got)
					}
				}
			}
			var n int64
			if err := admin.QueryRow(ctx, "SELECT n FROM t WHERE id = 1").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if want := int64(2 * len(keySets)); n != want {
				t.Fatalf("n = %d after %d commits (rolled-back updates must not count)", n, want)
			}
			db.Exec("UPDATE t SET n = 0")
		})
	}
}

func uniq(keys []advisory.Key) []advisory.Key {
	var out []advisory.Key
	for _, k := range keys {
		dup := false
		for _, o := range out {
			dup = dup || o.Compare(k) == 0
		}
		if !dup {
			out = append(out, k)
		}
	}
	return out
}

// A successful transaction reports one acquisition and one release per
// key, with the wait and the hold time, under Source "txlock" and System
// "postgresql".
func TestObserverEvents(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	ctx := context.Background()
	keys := []advisory.Key{advisory.KeyInt(2), advisory.KeyInt(1)}
	for _, be := range backends(t, db, bePgxPool, beSQL) {
		t.Run(be.name, func(t *testing.T) {
			var evs observetest.Recorder
			if err := be.do(ctx, keys, func(context.Context, q) error { return nil }, txlock.WithObserver(&evs)); err != nil {
				t.Fatal(err)
			}
			got := evs.Events()
			if len(got) != 4 {
				t.Fatalf("%d events: %+v", len(got), got)
			}
			for i, ev := range got {
				wantKind, wantOutcome := observe.LockAcquire, observe.Acquired
				if i >= 2 {
					wantKind, wantOutcome = observe.LockRelease, observe.Released
				}
				if ev.Kind != wantKind || ev.Outcome != wantOutcome || ev.Source != "txlock" || ev.System != "postgresql" || ev.Key != int64(i%2+1) {
					t.Errorf("event %d: %+v", i, ev)
				}
				if (wantKind == observe.LockAcquire && ev.Wait <= 0) || (wantKind == observe.LockRelease && ev.Hold <= 0) {
					t.Errorf("event %d: no wait/hold time: %+v", i, ev)
				}
			}
		})
	}
}

// Events name each key made from text, as advisory's do, so traces and
// logs show "booking:seat-42" where pg_locks shows a number; a key without
// text has no name.
func TestObserverEventsCarryTheKeyName(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	named, unnamed := advisory.KeyOf("booking:seat-42"), advisory.KeyInt(7)
	for _, be := range backends(t, db, bePgxPool, beSQL) {
		t.Run(be.name, func(t *testing.T) {
			var evs observetest.Recorder
			err := be.do(ctx, []advisory.Key{named, unnamed}, func(context.Context, q) error { return nil },
				txlock.WithObserver(&evs))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := named.Int64()
			names := map[int64]string{}
			for _, ev := range evs.Events() {
				names[ev.Key] = ev.Name
			}
			if len(evs.Events()) != 4 || names[want] != "booking:seat-42" || names[7] != "" {
				t.Fatalf("names by key: %v (events %+v)", names, evs.Events())
			}
		})
	}
}

// fn's error is returned as it is (identity) when not retried; a retryable
// one runs the whole transaction again; when attempts run out the last
// error is still visible through errors.Is.
func TestFnErrors(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	ctx := context.Background()
	key := []advisory.Key{advisory.KeyOf("fn-errors")}
	for _, be := range backends(t, db, bePgxPool, beSQL) {
		t.Run(be.name, func(t *testing.T) {
			calls := 0
			err := be.do(ctx, key, func(context.Context, q) error { calls++; return errBoom })
			if err != errBoom || calls != 1 {
				t.Fatalf("got %v after %d calls", err, calls)
			}
			// A serialization failure raised inside fn: the whole
			// transaction runs again.
			calls = 0
			err = be.do(ctx, key, func(ctx context.Context, tx q) error {
				calls++
				if calls < 3 {
					return tx.Exec(ctx, "DO $$BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END$$")
				}
				return nil
			}, txlock.WithRetry(retry.WithBackoff(retry.Constant(0))))
			if err != nil || calls != 3 {
				t.Fatalf("got %v after %d calls", err, calls)
			}
			calls = 0
			err = be.do(ctx, key, func(ctx context.Context, tx q) error {
				calls++
				return tx.Exec(ctx, "DO $$BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END$$")
			}, txlock.WithRetry(retry.WithMaxAttempts(3), retry.WithBackoff(retry.Constant(0))))
			if !errors.Is(err, retry.ErrExhausted) || retry.SQLState(err) != "40001" || calls != 3 {
				t.Fatalf("got %v after %d calls", err, calls)
			}
			calls = 0
			err = be.do(ctx, key, func(ctx context.Context, tx q) error {
				calls++
				return tx.Exec(ctx, "DO $$BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END$$")
			}, txlock.WithoutRetry())
			if retry.SQLState(err) != "40001" || errors.Is(err, retry.ErrExhausted) || calls != 1 {
				t.Fatalf("WithoutRetry: got %v after %d calls", err, calls)
			}
		})
	}
}

// TestErrorsNameTheKeyText: a timeout, a try-once refusal and a nested
// request name a key made from text by its text, beside its number.
func TestErrorsNameTheKeyText(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	key := advisory.KeyOf("booking:seat-42")
	name := `"booking:seat-42"`
	h := holdLocks(t, db, false, key)
	ctx := context.Background()
	for _, be := range backends(t, db, bePgxPool, beSQL) {
		t.Run(be.name, func(t *testing.T) {
			nop := func(context.Context, q) error { return nil }
			for _, opt := range []txlock.Option{txlock.TryOnce(), txlock.WithTimeout(time.Millisecond)} {
				err := be.do(ctx, []advisory.Key{key}, nop, opt)
				var le *lockedtx.LockError
				if !errors.As(err, &le) || !strings.Contains(err.Error(), name) {
					t.Errorf("error %v does not name %s", err, name)
				}
			}
		})
	}
	h.release()
	err := txlock.DoPgx(ctx, db.Pool(), key, func(ctx context.Context, _ pgx.Tx) error {
		return txlock.DoPgx(ctx, db.Pool(), key, func(context.Context, pgx.Tx) error { return nil })
	})
	if !errors.Is(err, txlock.ErrAlreadyHeld) || !strings.Contains(err.Error(), name) {
		t.Errorf("nested: error %v does not name %s", err, name)
	}
}
