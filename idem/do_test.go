package idem_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/idem"
)

type receipt struct {
	Order  string    `json:"order"`
	Charge int64     `json:"charge"`
	At     time.Time `json:"at"`
}

// charge is the business write: one effects row, returning its id.
func charge(exec func(string, ...any) error, queryID func() (int64, error), key string) (receipt, error) {
	if err := exec(`INSERT INTO effects (key) VALUES ($1)`, key); err != nil {
		return receipt{}, err
	}
	id, err := queryID()
	return receipt{Order: key, Charge: id, At: time.Now()}, err
}

// TestConcurrentIdenticalCallsRunOnce: 64 goroutines call Do with the same
// key at once, each in its own transaction: fn runs exactly once (one
// effects row), and the 63 others replay a result byte-identical to the
// first.
func TestConcurrentIdenticalCallsRunOnce(t *testing.T) {
	leakCheck(t)
	forEachRunner(t, func(t *testing.T, r txRunner) {
		db := newDB(t)
		run := r.open(t, db)
		ctx := context.Background()
		var runs atomic.Int32
		results := make([][]byte, 64)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				err := run(ctx, func(tx any, exec func(string, ...any) error) error {
					v, err := idem.Do(ctx, tx, "user:1", "order-7", []byte("fp"), func(ctx context.Context) (receipt, error) {
						runs.Add(1)
						return charge(exec, func() (int64, error) { return 1, nil }, "order-7")
					})
					if err != nil {
						return err
					}
					results[i], err = json.Marshal(v)
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := runs.Load(); n != 1 {
			t.Fatalf("fn ran %d times, want 1", n)
		}
		if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		for i, b := range results {
			if !bytes.Equal(b, results[0]) {
				t.Fatalf("result %d = %s, want %s", i, b, results[0])
			}
		}
	})
}

// TestCommitKeepsKeyAndEffectRollbackNeither: the key and fn's writes
// commit together or not at all; after a rollback the next call runs fn.
func TestCommitKeepsKeyAndEffectRollbackNeither(t *testing.T) {
	leakCheck(t)
	forEachRunner(t, func(t *testing.T, r txRunner) {
		db := newDB(t)
		run := r.open(t, db)
		ctx := context.Background()
		errAbort := errors.New("abort after Do")
		runs := 0
		call := func(abort bool) (string, error) {
			var out string
			err := run(ctx, func(tx any, exec func(string, ...any) error) error {
				v, err := idem.Do(ctx, tx, "", "k", nil, func(ctx context.Context) (string, error) {
					runs++
					return fmt.Sprintf("run %d", runs), exec(`INSERT INTO effects (key) VALUES ('k')`)
				})
				out = v
				if err == nil && abort {
					return errAbort
				}
				return err
			})
			return out, err
		}
		if _, err := call(true); !errors.Is(err, errAbort) {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT count(*) FROM effects`) + count(t, db, `SELECT count(*) FROM sqlock_idem`); n != 0 {
			t.Fatalf("after rollback: %d rows of effects and keys, want 0", n)
		}
		if v, err := call(false); err != nil || v != "run 2" {
			t.Fatalf("after rollback: %q, %v; want a new run", v, err)
		}
		if v, err := call(false); err != nil || v != "run 2" || runs != 2 {
			t.Fatalf("replay: %q, %v, %d runs; want run 2's result", v, err, runs)
		}
		if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// TestKeyReusedWithDifferentFingerprint: the same key with another
// fingerprint is ErrKeyReused and fn does not run — also while the first
// call is still in progress (the reuse is found once it commits).
func TestKeyReusedWithDifferentFingerprint(t *testing.T) {
	leakCheck(t)
	forEachRunner(t, func(t *testing.T, r txRunner) {
		db := newDB(t)
		run := r.open(t, db)
		ctx := context.Background()
		do := func(fp string) error {
			return run(ctx, func(tx any, exec func(string, ...any) error) error {
				_, err := idem.Do(ctx, tx, "s", "k", []byte(fp), func(ctx context.Context) (int, error) {
					return 1, exec(`INSERT INTO effects (key) VALUES ($1)`, fp)
				})
				return err
			})
		}
		if err := do("body A"); err != nil {
			t.Fatal(err)
		}
		err := do("body B")
		if !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("err = %v, want ErrKeyReused", err)
		}
		if n := count(t, db, `SELECT count(*) FROM effects WHERE key = 'body B'`); n != 0 {
			t.Fatal("fn ran for the reused key")
		}
		if err := do("body A"); err != nil {
			t.Fatalf("the original request no longer replays: %v", err)
		}
	})
}

// TestScopesAreSeparate: the same key in two scopes (principals) is two
// keys: fn runs once in each.
func TestScopesAreSeparate(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	run := runners[0].open(t, db)
	ctx := context.Background()
	runs := map[string]int{}
	for _, scope := range []string{"alice", "bob", "alice", "bob"} {
		err := run(ctx, func(tx any, _ func(string, ...any) error) error {
			v, err := idem.Do(ctx, tx, scope, "same-key", []byte("same body"), func(ctx context.Context) (string, error) {
				runs[scope]++
				return scope, nil
			})
			if err == nil && v != scope {
				err = fmt.Errorf("scope %s replayed %q", scope, v)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if runs["alice"] != 1 || runs["bob"] != 1 {
		t.Fatalf("runs = %v, want one per scope", runs)
	}
}

// TestPanicRollsBackAndReraises: a panicking fn makes Do roll the caller's
// transaction back and re-raise; the key is not left claimed (a commit
// attempted after recovering fails), and a retry runs fn.
func TestPanicRollsBackAndReraises(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	for _, name := range []string{"pgx", "sql"} {
		t.Run(name, func(t *testing.T) {
			key := "panic-" + name
			var commitErr error
			func() {
				defer func() {
					if p := recover(); p != "boom" {
						t.Fatalf("recovered %v, want the panic re-raised", p)
					}
				}()
				fn := func(ctx context.Context) (int, error) { panic("boom") }
				if name == "pgx" {
					tx, err := db.Pool().Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer func() { commitErr = tx.Commit(ctx) }() // a caller that commits anyway
					_, _ = idem.Do(ctx, tx, "", key, nil, fn)
				} else {
					tx, err := db.SQL().BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer func() { commitErr = tx.Commit() }()
					_, _ = idem.Do(ctx, tx, "", key, nil, fn)
				}
			}()
			if commitErr == nil {
				t.Fatal("the commit after the panic succeeded")
			}
			if n := count(t, db, `SELECT count(*) FROM sqlock_idem WHERE key = $1`, key); n != 0 {
				t.Fatal("key left claimed after a panic")
			}
			tx, err := db.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			v, err := idem.Do(ctx, tx, "", key, nil, func(ctx context.Context) (int, error) { return 42, nil })
			if err != nil || v != 42 {
				t.Fatalf("retry: %v, %v", v, err)
			}
		})
	}
}

// TestFnErrorIsNotStored: an error from fn is returned as it is; even a
// caller that commits then records no key, so a retry runs fn.
func TestFnErrorIsNotStored(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	errCard := errors.New("card declined")
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idem.Do(ctx, tx, "", "k", nil, func(ctx context.Context) (int, error) { return 0, errCard }); err != errCard {
		t.Fatalf("err = %v, want fn's error as it is", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM sqlock_idem`); n != 0 {
		t.Fatal("a failed fn left its key recorded")
	}
}

// TestExpiredKeyCountsAsNew: a key past its retention, not yet swept, is
// claimed again and fn runs.
func TestExpiredKeyCountsAsNew(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	runs := 0
	do := func() int {
		t.Helper()
		var v int
		err := pgx.BeginFunc(ctx, db.Pool(), func(tx pgx.Tx) error {
			var err error
			v, err = idem.Do(ctx, tx, "", "k", []byte("a"), func(ctx context.Context) (int, error) { runs++; return runs, nil })
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first := do()
	if again := do(); first != 1 || again != 1 {
		t.Fatalf("within retention: %d then %d, want 1 replayed", first, again)
	}
	db.Exec(`UPDATE sqlock_idem SET expires_at = clock_timestamp() - interval '1 second'`)
	if v := do(); v != 2 {
		t.Fatalf("expired key replayed %d, want a new run", v)
	}
	if v := do(); v != 2 {
		t.Fatalf("the new run was not recorded: %d", v)
	}
}

// TestBadInputChangesNothing: bad keys, scopes, handles, functions and
// options get typed errors and send nothing.
func TestBadInputChangesNothing(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ran := false
	fn := func(context.Context) (int, error) { ran = true; return 1, nil }
	var nilSQLTx *sql.Tx
	var nilPoolTx *pgxpool.Tx
	cases := []struct {
		name  string
		tx    any
		scope string
		key   string
		fn    func(context.Context) (int, error)
		opts  []idem.Option
		want  error
	}{
		{"empty key", tx, "", "", fn, nil, idem.ErrInvalidKey},
		{"over-long key", tx, "", strings.Repeat("k", 256), fn, nil, idem.ErrInvalidKey},
		{"NUL in key", tx, "", "a\x00b", fn, nil, idem.ErrInvalidKey},
		{"invalid UTF-8 key", tx, "", "\xff", fn, nil, idem.ErrInvalidKey},
		{"over-long scope", tx, strings.Repeat("s", 256), "k", fn, nil, idem.ErrInvalidKey},
		{"nil tx", nil, "", "k", fn, nil, sqlock.ErrNilHandle},
		{"typed nil *sql.Tx", nilSQLTx, "", "k", fn, nil, sqlock.ErrNilHandle},
		{"typed nil *pgxpool.Tx", pgx.Tx(nilPoolTx), "", "k", fn, nil, sqlock.ErrNilHandle},
		{"a pool is not a transaction", db.Pool(), "", "k", fn, nil, sqlock.ErrUnsupported},
		{"a *sql.DB is not a transaction", db.SQL(), "", "k", fn, nil, sqlock.ErrUnsupported},
		{"nil fn", tx, "", "k", nil, nil, sqlock.ErrNilHandle},
		{"zero retention", tx, "", "k", fn, []idem.Option{idem.WithRetention(0)}, sqlock.ErrInvalidOption},
		{"bad table", tx, "", "k", fn, []idem.Option{idem.WithTable("a;b")}, sqlock.ErrInvalidOption},
		{"nil codec", tx, "", "k", fn, []idem.Option{idem.WithCodec(nil)}, sqlock.ErrInvalidOption},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := idem.Do(ctx, c.tx, c.scope, c.key, nil, c.fn, c.opts...)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if c.want == idem.ErrInvalidKey && !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Fatalf("err = %v, want it to match sqlock.ErrInvalidArgument too", err)
			}
		})
	}
	if _, err := idem.Do(ctx, tx, "", "k", nil, fn, idem.WithTable("a;b")); !errors.Is(err, sqlock.ErrInvalidArgument) {
		t.Fatalf("bad table: %v, want it to match sqlock.ErrInvalidArgument too", err)
	}
	if ran {
		t.Fatal("fn ran on bad input")
	}
	// The transaction is untouched: still usable, nothing recorded.
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM sqlock_idem`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after bad input: %d keys, %v", n, err)
	}
	if _, err := idem.Do(ctx, tx, "", strings.Repeat("k", 255), nil, fn); err != nil || !ran {
		t.Fatalf("a 255-byte key: %v", err)
	}
	for _, o := range []idem.Option{idem.WithBatch(0), idem.WithBatch(1001), idem.WithRetention(-time.Second)} {
		if _, err := idem.Sweep(ctx, db.Pool(), o); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Fatalf("Sweep with a bad option: %v", err)
		}
	}
	if _, err := idem.Sweep(ctx, (*pgxpool.Pool)(nil)); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Sweep(nil): %v", err)
	}
	if err := idem.Migrate(ctx, (*sql.DB)(nil)); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Migrate(nil): %v", err)
	}
	if _, err := idem.Middleware((*sql.DB)(nil), idem.WithScope(func(*http.Request) string { return "" })); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Middleware(nil): %v", err)
	}
}

// TestCustomTableAndCodec: WithTable and WithCodec are used by Migrate, Do
// and Sweep alike.
func TestCustomTableAndCodec(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	db.Exec(`CREATE SCHEMA app`)
	opts := []idem.Option{idem.WithTable("app.keys"), idem.WithCodec(upper{})}
	if err := idem.Migrate(ctx, db.SQL(), opts...); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err := pgx.BeginFunc(ctx, db.Pool(), func(tx pgx.Tx) error {
			v, err := idem.Do(ctx, tx, "", "k", nil, func(context.Context) (string, error) { return "hello", nil }, opts...)
			if err == nil && v != "hello" {
				err = fmt.Errorf("got %q", v)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var stored string
	if err := db.Pool().QueryRow(ctx, `SELECT convert_from(result, 'UTF8') FROM app.keys`).Scan(&stored); err != nil || stored != "HELLO" {
		t.Fatalf("stored %q, %v; want the codec's bytes", stored, err)
	}
	if n := count(t, db, `SELECT count(*) FROM sqlock_idem`); n != 0 {
		t.Fatal("the default table was used")
	}
}

// upper stores a string upper-cased and reads it back lower-cased.
type upper struct{}

func (upper) Marshal(v any) ([]byte, error) { return []byte(strings.ToUpper(v.(string))), nil }
func (upper) Unmarshal(b []byte, v any) error {
	*v.(*string) = strings.ToLower(string(b))
	return nil
}

// TestRepeatableReadSeesAConcurrentKeyAsASerializationFailure: under
// REPEATABLE READ, a key committed after the transaction's snapshot fails
// the claim with 40001 (fn does not run); the retried transaction replays.
func TestRepeatableReadSeesAConcurrentKeyAsASerializationFailure(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	fn := func(v int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { return v, nil }
	}
	rr := pgx.TxOptions{IsoLevel: pgx.RepeatableRead}
	tx, err := db.Pool().BeginTx(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, db.Pool(), func(other pgx.Tx) error {
		_, err := idem.Do(ctx, other, "", "k", nil, fn(1))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_, err = idem.Do(ctx, tx, "", "k", nil, fn(2))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("err = %v, want SQLSTATE 40001", err)
	}
	tx.Rollback(ctx)
	var v int
	if err := pgx.BeginTxFunc(ctx, db.Pool(), rr, func(tx pgx.Tx) error {
		v, err = idem.Do(ctx, tx, "", "k", nil, fn(3))
		return err
	}); err != nil || v != 1 {
		t.Fatalf("retry: %d, %v; want the first result replayed", v, err)
	}
}
