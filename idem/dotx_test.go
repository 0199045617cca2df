package idem_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// ownRunner is a handle DoTx begins its transactions on, with the
// business write for fn: one effects row for key.
type ownRunner struct {
	name string
	// folds: BEGIN carries the claim and COMMIT the result.
	folds bool
	open  func(t testing.TB, db *pgtest.DB, w *pgtest.Wire) func(ctx context.Context, scope, key string, fp []byte, res string) (string, error)
}

func dotxPgx(ctx context.Context, p *pgxpool.Pool, scope, key string, fp []byte, res string) (string, error) {
	return idem.DoTx(ctx, p, scope, key, fp, func(ctx context.Context, tx pgx.Tx) (string, error) {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ($1)`, key)
		return res, err
	})
}

func dotxSQL(ctx context.Context, d *sql.DB, scope, key string, fp []byte, res string) (string, error) {
	return idem.DoTx(ctx, d, scope, key, fp, func(ctx context.Context, tx *sql.Tx) (string, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (key) VALUES ($1)`, key)
		return res, err
	})
}

// openFoldingDB is a *sql.DB of txlock.OpenDB, dialled through w if not
// nil. A counted connection is never pinged: pgx's driver pings one that
// sat idle for a second before handing it out again, a round trip that a
// busy machine would add to a count between two steps.
func openFoldingDB(t testing.TB, dsn string, w *pgtest.Wire) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var opts []stdlib.OptionOpenDB
	if w != nil {
		cfg.DialFunc = w.Dial
		opts = append(opts, stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false }))
	}
	d := txlock.OpenDB(*cfg, opts...)
	t.Cleanup(func() { d.Close() })
	return d
}

var ownRunners = []ownRunner{
	{"pgxpool", true, func(t testing.TB, db *pgtest.DB, w *pgtest.Wire) func(context.Context, string, string, []byte, string) (string, error) {
		p := openPool(t, db.DSN, w)
		return func(ctx context.Context, scope, key string, fp []byte, res string) (string, error) {
			return dotxPgx(ctx, p, scope, key, fp, res)
		}
	}},
	{"sql-txlock.OpenDB", true, func(t testing.TB, db *pgtest.DB, w *pgtest.Wire) func(context.Context, string, string, []byte, string) (string, error) {
		d := openFoldingDB(t, db.DSN, w)
		return func(ctx context.Context, scope, key string, fp []byte, res string) (string, error) {
			return dotxSQL(ctx, d, scope, key, fp, res)
		}
	}},
	{"sql-libpq", false, func(t testing.TB, db *pgtest.DB, _ *pgtest.Wire) func(context.Context, string, string, []byte, string) (string, error) {
		d := openSQL(t, "postgres", db.DSN)
		return func(ctx context.Context, scope, key string, fp []byte, res string) (string, error) {
			return dotxSQL(ctx, d, scope, key, fp, res)
		}
	}},
}

func forEachOwnRunner(t *testing.T, f func(t *testing.T, r ownRunner)) {
	for _, r := range ownRunners {
		t.Run(r.name, func(t *testing.T) { f(t, r) })
	}
}

// TestDoTxRunsOnceAndReplays: 64 concurrent DoTx calls with one key run fn
// once (one effects row) and all return the same result; a later call
// replays it; another fingerprint is ErrKeyReused, and nothing runs.
func TestDoTxRunsOnceAndReplays(t *testing.T) {
	leakCheck(t)
	forEachOwnRunner(t, func(t *testing.T, r ownRunner) {
		db := newDB(t)
		runsOnceAndReplays(t, db, r.open(t, db, nil))
	})
}

// TestDoTxInEveryExecModeAndThroughPgBouncer: the same on pgx connections
// in each of pgx's query exec modes, where a replay's failed batch is
// handled without prepared statements of idem's own, and through PgBouncer
// in transaction mode (exec mode: PgBouncer 1.18 keeps no prepared
// statements); after the replays, new keys still run once.
func TestDoTxInEveryExecModeAndThroughPgBouncer(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	bouncer := pgtest.StartPgBouncer(t, db, "transaction")
	for _, c := range []struct{ name, dsn, mode string }{
		{"cache_describe", db.DSN, "cache_describe"},
		{"describe_exec", db.DSN, "describe_exec"},
		{"exec", db.DSN, "exec"},
		{"simple_protocol", db.DSN, "simple_protocol"},
		{"pgbouncer-transaction-exec", bouncer, "exec"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db.Exec(`TRUNCATE effects, sqlock_idem`)
			sep := "?"
			if strings.Contains(c.dsn, "?") {
				sep = "&"
			}
			dsn := c.dsn + sep + "default_query_exec_mode=" + c.mode
			p := openPool(t, dsn, nil)
			do := func(ctx context.Context, scope, key string, fp []byte, res string) (string, error) {
				return dotxPgx(ctx, p, scope, key, fp, res)
			}
			runsOnceAndReplays(t, db, do)
			ctx := context.Background()
			for i := range 5 {
				key := fmt.Sprintf("after-%d", i)
				for _, res := range []string{"first", "replayed"} {
					if v, err := do(ctx, "user:1", key, nil, res); err != nil || v != "first" {
						t.Fatalf("%s (%s): %q, %v; want %q", key, res, v, err, "first")
					}
				}
			}
			if n := count(t, db, `SELECT count(*) FROM effects`); n != 6 {
				t.Fatalf("%d effects, want 6", n)
			}
		})
	}
}

// runsOnceAndReplays: 64 concurrent calls of do with one key run fn once
// and return one result; a later call replays it; another fingerprint is
// ErrKeyReused, and nothing runs.
func runsOnceAndReplays(t *testing.T, db *pgtest.DB, do func(ctx context.Context, scope, key string, fp []byte, res string) (string, error)) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var mismatched atomic.Int32
	start := make(chan struct{})
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v, err := do(ctx, "user:1", "order-7", []byte("fp"), "charged")
			if err != nil {
				t.Error(err)
			} else if v != "charged" {
				mismatched.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if n := mismatched.Load(); n != 0 {
		t.Fatalf("%d results differ from the first", n)
	}
	if v, err := do(ctx, "user:1", "order-7", []byte("fp"), "again"); err != nil || v != "charged" {
		t.Fatalf("replay: %q, %v; want the first result", v, err)
	}
	if _, err := do(ctx, "user:1", "order-7", []byte("other"), "x"); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("other fingerprint: %v, want ErrKeyReused", err)
	}
	if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
		t.Fatalf("%d effects after the replay, want 1", n)
	}
}

// TestDoTxFailedStoreCommitsNothing: the result is stored in COMMIT's
// pipeline; when storing it fails (here a CHECK constraint refuses it),
// the COMMIT does not happen: neither the key nor fn's write exists, the
// connection is usable, and a retry runs fn and commits both.
func TestDoTxFailedStoreCommitsNothing(t *testing.T) {
	leakCheck(t)
	forEachOwnRunner(t, func(t *testing.T, r ownRunner) {
		db := newDB(t)
		db.Exec(`ALTER TABLE sqlock_idem ADD CONSTRAINT refuse_poison CHECK (result IS NULL OR result <> '"poison"'::bytea)`)
		do := r.open(t, db, nil)
		ctx := context.Background()
		for range 3 { // the same connection, again and again
			_, err := do(ctx, "", "k", nil, "poison")
			if err == nil || !strings.Contains(err.Error(), "refuse_poison") {
				t.Fatalf("storing a refused result: %v, want the CHECK violation", err)
			}
			if n := count(t, db, `SELECT count(*) FROM effects WHERE key = 'k'`); n != 0 {
				t.Fatalf("the failed store committed %d effects without the key", n)
			}
			if n := count(t, db, `SELECT count(*) FROM sqlock_idem WHERE key = 'k'`); n != 0 {
				t.Fatalf("the failed store left the key")
			}
		}
		if v, err := do(ctx, "", "k", nil, "ok"); err != nil || v != "ok" {
			t.Fatalf("retry: %q, %v", v, err)
		}
		if n := count(t, db, `SELECT count(*) FROM effects WHERE key = 'k'`); n != 1 {
			t.Fatalf("%d effects after the retry, want 1", n)
		}
		if n := count(t, db, `SELECT count(*) FROM sqlock_idem WHERE key = 'k' AND result IS NOT NULL`); n != 1 {
			t.Fatalf("the retry did not record the key")
		}
	})
}

// TestDoTxFnErrorAndPanicCommitNothing: fn's error is returned and a panic
// re-raised; either way nothing commits, and the key stays free.
func TestDoTxFnErrorAndPanicCommitNothing(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	p := openPool(t, db.DSN, nil)
	ctx := context.Background()
	boom := errors.New("boom")
	_, err := idem.DoTx(ctx, p, "", "k", nil, func(ctx context.Context, tx pgx.Tx) (int, error) {
		_, _ = tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
		return 0, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("fn's error: %v", err)
	}
	func() {
		defer func() {
			if recover() != "panic in fn" {
				t.Fatal("the panic was not re-raised")
			}
		}()
		_, _ = idem.DoTx(ctx, p, "", "k", nil, func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, _ = tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
			panic("panic in fn")
		})
	}()
	if n := count(t, db, `SELECT count(*) FROM effects`) + count(t, db, `SELECT count(*) FROM sqlock_idem`); n != 0 {
		t.Fatalf("%d rows committed after a failed fn", n)
	}
	if v, err := idem.DoTx(ctx, p, "", "k", nil, func(context.Context, pgx.Tx) (int, error) { return 7, nil }); err != nil || v != 7 {
		t.Fatalf("after the failures: %d, %v", v, err)
	}
}

// TestDoTxBadInputSendsNothing: a nil handle, a nil fn, a transaction type
// the handle does not give, or a bad key is refused before anything is
// sent.
func TestDoTxBadInputSendsNothing(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	var w pgtest.Wire
	p := openPool(t, db.DSN, &w)
	d := openFoldingDB(t, db.DSN, &w)
	ctx := context.Background()
	ok := func(context.Context, pgx.Tx) (int, error) { return 1, nil }
	w.Reset()
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"nil pool", func() error { _, err := idem.DoTx(ctx, (*pgxpool.Pool)(nil), "", "k", nil, ok); return err }(), sqlock.ErrNilHandle},
		{"nil fn", func() error {
			_, err := idem.DoTx[int, pgx.Tx](ctx, p, "", "k", nil, nil)
			return err
		}(), sqlock.ErrNilHandle},
		{"pgx.Tx on *sql.DB", func() error { _, err := idem.DoTx(ctx, d, "", "k", nil, ok); return err }(), sqlock.ErrUnsupported},
		{"*sql.Tx on a pool", func() error {
			_, err := idem.DoTx(ctx, p, "", "k", nil, func(context.Context, *sql.Tx) (int, error) { return 1, nil })
			return err
		}(), sqlock.ErrUnsupported},
		{"empty key", func() error { _, err := idem.DoTx(ctx, p, "", "", nil, ok); return err }(), idem.ErrInvalidKey},
		{"long key", func() error { _, err := idem.DoTx(ctx, p, "", strings.Repeat("k", 256), nil, ok); return err }(), idem.ErrInvalidKey},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
		if c.want == idem.ErrInvalidKey && !errors.Is(c.err, sqlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want it to match sqlock.ErrInvalidArgument too", c.name, c.err)
		}
	}
	if turns, _ := w.Counts(); turns != 0 {
		t.Fatalf("%d round trips for refused input", turns)
	}
}

// TestDoTxCostsTheRoundTripsOfThePlainTransaction: on pgx and on a
// *sql.DB of txlock.OpenDB, a transaction that inserts one row costs 3
// round trips (BEGIN, INSERT, COMMIT) without idem and 3 inside DoTx
// (BEGIN+claim, INSERT, store+COMMIT); a replay costs 2 (BEGIN+claim,
// ROLLBACK). Through the middleware on a pool, likewise: 3 for the first
// request, 2 for a replay. Counted on the wire, turns and ReadyForQuery
// alike, after a warm-up that prepares the statements.
func TestDoTxCostsTheRoundTripsOfThePlainTransaction(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	var w pgtest.Wire
	pcfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 1
	pcfg.ConnConfig.DialFunc = w.Dial
	pcfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	p, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	d := openFoldingDB(t, db.DSN, &w)
	d.SetMaxOpenConns(1)
	d.SetMaxIdleConns(1)

	plainPgx := func(key string) error {
		return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ($1)`, key)
			return err
		})
	}
	plainSQL := func(key string) error {
		tx, err := d.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO effects (key) VALUES ($1)`, key); err != nil {
			return err
		}
		return tx.Commit()
	}
	mw, err := idem.Middleware(p, idem.WithScope(func(*http.Request) string { return "" }))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		tx, _ := idem.TxFrom[pgx.Tx](r.Context())
		if _, err := tx.Exec(r.Context(), `INSERT INTO effects (key) VALUES ('http')`); err != nil {
			http.Error(rw, err.Error(), 500)
			return
		}
		_, _ = rw.Write([]byte("done"))
	}))
	serve := func(key string) error {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/pay", bytes.NewReader([]byte("{}")))
		req.Header.Set("Idempotency-Key", key)
		h.ServeHTTP(rec, req)
		if rec.Code != 200 || rec.Body.String() != "done" {
			return errors.New("middleware: " + rec.Body.String())
		}
		return nil
	}
	type step struct {
		name string
		want int
		run  func(key string) error
	}
	steps := []step{
		{"pgx: plain transaction", 3, plainPgx},
		{"pgx: DoTx, first execution", 3, func(key string) error { _, err := dotxPgx(ctx, p, "", key, nil, "r"); return err }},
		{"pgx: DoTx, replay", 1, func(key string) error { _, err := dotxPgx(ctx, p, "", key, nil, "r"); return err }},
		{"sql (txlock.OpenDB): plain transaction", 3, plainSQL},
		{"sql (txlock.OpenDB): DoTx, first execution", 3, func(key string) error { _, err := dotxSQL(ctx, d, "", key, nil, "r"); return err }},
		{"sql (txlock.OpenDB): DoTx, replay", 1, func(key string) error { _, err := dotxSQL(ctx, d, "", key, nil, "r"); return err }},
		{"pgx: Middleware, first request", 3, serve},
		{"pgx: Middleware, replay", 1, serve},
	}
	for i, s := range steps {
		// Warm up: the statements prepared on the connection, a replay's
		// key recorded by the step before it.
		for j := range 2 {
			key := fmt.Sprintf("warm-%d-%d", i, j)
			if strings.HasSuffix(s.name, "replay") {
				key = "k" + string(rune('0'+i-1))
			}
			if err := s.run(key); err != nil {
				t.Fatal(s.name, err)
			}
		}
		key := "k" + string(rune('0'+i))
		if strings.HasSuffix(s.name, "replay") {
			key = "k" + string(rune('0'+i-1))
		}
		w.Reset()
		if err := s.run(key); err != nil {
			t.Fatal(s.name, err)
		}
		checkTurns(t, &w, s.name, s.want)
	}
	// A replay is answered by a statement that fails on purpose, and pgx
	// evicts a failed batch's statements from its cache: the next
	// transaction must not pay for preparing them again.
	for i, s := range []step{steps[1], steps[4]} {
		for j := range 3 {
			if err := steps[[]int{2, 5}[i]].run("k" + string(rune('0'+[]int{1, 4}[i]))); err != nil {
				t.Fatal(err)
			}
			w.Reset()
			if err := s.run(fmt.Sprintf("after-replay-%d-%d", i, j)); err != nil {
				t.Fatal(err)
			}
			checkTurns(t, &w, s.name+" right after a replay", s.want)
		}
	}
}

func checkTurns(t *testing.T, w *pgtest.Wire, name string, want int) {
	t.Helper()
	turns, ready := w.Counts()
	t.Logf("%-60s %d round trips (%d ReadyForQuery)", name, turns, ready)
	if turns != want || ready != want {
		t.Errorf("%s: %d round trips, %d ReadyForQuery; want %d", name, turns, ready, want)
	}
}
