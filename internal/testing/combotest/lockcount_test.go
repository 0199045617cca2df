package combotest

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/txlock"
)

// advisoryCall matches a call of one of PostgreSQL's advisory-lock
// functions in SQL text or in Go source.
var advisoryCall = regexp.MustCompile(`pg_(?:try_)?advisory_[a-z_]+`)

// sentStatement is one statement as a driver sent it: its text and
// arguments.
type sentStatement struct {
	sql  string
	args []any
}

// statementLog records every statement that calls an advisory-lock
// function, as pgx sends it (a query, an exec, a batch's queries), on any
// connection whose config carries it as its tracer.
type statementLog struct {
	mu   sync.Mutex
	sent []sentStatement
}

func (l *statementLog) record(sql string, args []any) {
	if !advisoryCall.MatchString(sql) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, sentStatement{sql, slices.Clone(args)})
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.record(d.SQL, d.Args)
	return ctx
}
func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (l *statementLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.record(d.SQL, d.Args)
}
func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// distinct is the statements recorded, each text and argument list once
// (arguments compared deeply: a fingerprint is a []byte).
func (l *statementLog) distinct() []sentStatement {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sentStatement
	for _, s := range l.sent {
		if !slices.ContainsFunc(out, func(o sentStatement) bool { return o.sql == s.sql && reflect.DeepEqual(o.args, s.args) }) {
			out = append(out, s)
		}
	}
	return out
}

// sourceAdvisoryCalls is every advisory-lock function named in the
// non-test, non-comment Go source of the packages that send SQL calling
// them.
func sourceAdvisoryCalls(t *testing.T) map[string]bool {
	t.Helper()
	found := map[string]bool{}
	for _, dir := range []string{"advisory", "internal/lockedtx", "txlock", "lease", "idem", "inspect"} {
		files, err := filepath.Glob(filepath.Join("..", "..", "..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go source in %s: %v", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.Lines(string(b)) {
				if code, _, _ := strings.Cut(line, "//"); !strings.HasPrefix(strings.TrimSpace(line), "//") {
					for _, fn := range advisoryCall.FindAllString(code, -1) {
						found[fn] = true
					}
				}
			}
		}
	}
	return found
}

// advisoryLocksOf lists the advisory locks in pg_locks, with their
// backend: those of this database.
const advisoryLocksOf = `SELECT pid, classid::int8, objid::int8, objsubid::int8, mode = 'ShareLock'
	FROM pg_locks WHERE locktype = 'advisory' AND granted
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

type heldAdvisory struct {
	pid                      uint32
	classid, objid, objsubid int64
	shared                   bool
}

func advisoryLocksHeld(t *testing.T, ctx context.Context, conn *pgx.Conn, where string, args ...any) []heldAdvisory {
	t.Helper()
	rows, err := conn.Query(ctx, advisoryLocksOf+where, args...)
	if err != nil {
		t.Fatal(err)
	}
	held, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (h heldAdvisory, err error) {
		err = r.Scan(&h.pid, &h.classid, &h.objid, &h.objsubid, &h.shared)
		return h, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// lockCount releases h, a lock of conn's own session, until the server
// says it holds no more, and returns how many times it was held.
func lockCount(t *testing.T, ctx context.Context, conn *pgx.Conn, h heldAdvisory) int {
	t.Helper()
	fn := "pg_advisory_unlock"
	if h.shared {
		fn = "pg_advisory_unlock_shared"
	}
	var q string
	var args []any
	switch h.objsubid {
	case 1: // a bigint key: its high half in classid, its low half in objid
		q, args = "SELECT pg_catalog."+fn+"($1::int8)", []any{h.classid<<32 | h.objid}
	case 2: // a pair of int4
		q, args = "SELECT pg_catalog."+fn+"($1::int4, $2::int4)", []any{int32(h.classid), int32(h.objid)}
	default:
		t.Fatalf("an advisory lock with objsubid %d", h.objsubid)
	}
	n := 0
	for {
		var released bool
		if err := conn.QueryRow(ctx, q, args...).Scan(&released); err != nil {
			t.Fatal(err)
		}
		if !released {
			return n
		}
		n++
		if n > 100 {
			t.Fatalf("%s still releases after 100 unlocks", q)
		}
	}
}

// replayCounts runs the session-level twin of s — the same statement
// shape with transaction-level calls turned into session-level ones, so
// the same number of evaluations, but locks that outlive the rolled-back
// transaction and can be unlocked, and so counted — on replay (backend
// pid), and returns how many times it took each lock. It runs in the
// database as the paths left it, and with the library's tables emptied
// (inside the transaction), where a statement that locks only for a key
// without a row (idem's claim) calls its lock.
func replayCounts(t *testing.T, ctx context.Context, replay, admin *pgx.Conn, pid uint32, s sentStatement) map[heldAdvisory]int {
	t.Helper()
	twin := strings.ReplaceAll(s.sql, "_xact_lock", "_lock")
	counts := map[heldAdvisory]int{}
	for _, state := range []string{"", "DELETE FROM " + idem.DefaultTable + "; DELETE FROM " + lease.DefaultTable} {
		if _, err := replay.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if state != "" {
			if _, err := replay.Exec(ctx, state); err != nil {
				t.Fatal(err)
			}
		}
		_, err := replay.Exec(ctx, twin, s.args...)
		if _, rerr := replay.Exec(ctx, "ROLLBACK"); rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			t.Fatalf("the session-level twin of %q (%v) failed: %v", s.sql, s.args, err)
		}
		for _, h := range advisoryLocksHeld(t, ctx, admin, " AND pid = $1", int64(pid)) {
			counts[h] = max(counts[h], lockCount(t, ctx, replay, h))
		}
	}
	return counts
}

// TestEveryAdvisoryStatementTakesOneLockCountPerKey: a statement that
// evaluated a lock call twice for a key (the call in a WHERE over several
// rows, in a repeated CASE arm, in a volatile subquery) would take the
// session lock twice, and one unlock would leave it held. Every path of
// the library that sends a statement calling pg_*advisory* runs here,
// through pgx's tracer, on pgxpool and database/sql — advisory's Lock,
// RLock, TryLock, TryRLock (bigint and int4-pair keys, multiplexed too),
// Do, a deadline-bound wait, a wait that times out (and is swept); txlock
// with one key, several, shared, try-once, a timeout, on DoPgx, Do and
// OpenDB; idem's middleware claim and Migrate; lease's Migrate — and:
//
//   - after each path, once it released what it took, pg_locks holds no
//     advisory lock (a session lock taken twice and released once would
//     stay);
//   - every statement recorded is run again, as it was sent, on a session
//     of its own inside a transaction that is rolled back, with
//     transaction-level calls turned into their session-level twins (the
//     same statement shape, so the same number of evaluations), and each
//     key it locked is then unlocked until the server says none is left:
//     exactly once per key;
//   - every advisory-lock function named in the packages' source was seen
//     in a recorded statement, so a new statement without a path here
//     fails the test.
func TestEveryAdvisoryStatementTakesOneLockCountPerKey(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	var log statementLog
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = &log
	pcfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.Tracer = &log
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sdb := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { sdb.Close() })
	odb := txlock.OpenDB(*cfg)
	t.Cleanup(func() { odb.Close() })
	admin, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })

	nothingHeld := func(t *testing.T, after string) {
		t.Helper()
		if held := advisoryLocksHeld(t, ctx, admin, ""); len(held) != 0 {
			t.Fatalf("after %s, pg_locks still holds %d advisory locks: %v", after, len(held), held)
		}
	}
	keys := []advisory.Key{advisory.KeyOf("lockcount"), advisory.KeyPair(7, -7)}
	nop := func(context.Context) error { return nil }

	lockers := map[string]func(opts ...advisory.Option) *advisory.Locker{
		"pgxpool": func(opts ...advisory.Option) *advisory.Locker { return advisory.NewPool(pool, opts...) },
		"sql":     func(opts ...advisory.Option) *advisory.Locker { return advisory.New(sdb, opts...) },
	}
	for name, open := range lockers {
		t.Run("advisory/"+name, func(t *testing.T) {
			for _, mux := range []bool{false, true} {
				var opts []advisory.Option
				if mux {
					opts = append(opts, advisory.WithMultiplexing(2))
				}
				l := open(opts...)
				for _, key := range keys {
					for _, take := range []struct {
						name string
						f    func(context.Context, advisory.Key) (*advisory.Lock, error)
					}{{"Lock", l.Lock}, {"RLock", l.RLock}, {"TryLock", l.TryLock}, {"TryRLock", l.TryRLock}} {
						lk, err := take.f(ctx, key)
						if err != nil {
							t.Fatalf("%s(%v), multiplexed %v: %v", take.name, key, mux, err)
						}
						if err := lk.Release(ctx); err != nil {
							t.Fatal(err)
						}
						nothingHeld(t, take.name+" and Release of "+key.String())
					}
					if err := l.Do(ctx, key, nop); err != nil {
						t.Fatal(err)
					}
					nothingHeld(t, "Do")
					dctx, cancel := context.WithTimeout(ctx, time.Minute)
					lk, err := l.Lock(dctx, key)
					cancel()
					if err != nil {
						t.Fatal(err)
					}
					if err := lk.Release(ctx); err != nil {
						t.Fatal(err)
					}
					nothingHeld(t, "a deadline-bound Lock and Release")
				}
			}
			// A wait that times out: the server's lock_timeout, then the
			// sweep of the session.
			holder := open()
			held, err := holder.Lock(ctx, keys[0])
			if err != nil {
				t.Fatal(err)
			}
			// Verified first, so that the whole bound is the wait on the
			// server.
			waiter := open(advisory.WithTimeout(time.Second))
			if err := waiter.Verify(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := waiter.Lock(ctx, keys[0]); !errors.Is(err, advisory.ErrTimeout) {
				t.Fatalf("Lock of a held key: %v, want ErrTimeout", err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			nothingHeld(t, "a timed-out Lock")
		})
	}

	t.Run("txlock", func(t *testing.T) {
		sets := []struct {
			name string
			opts []txlock.Option
		}{
			{"one key", nil},
			{"several keys", []txlock.Option{txlock.AlsoLock(advisory.KeyInt(11), advisory.KeyPair(1, 2))}},
			{"shared", []txlock.Option{txlock.Shared(), txlock.AlsoLock(advisory.KeyInt(12))}},
			{"try-once", []txlock.Option{txlock.TryOnce()}},
			{"try-once, several keys", []txlock.Option{txlock.TryOnce(), txlock.AlsoLock(advisory.KeyInt(13))}},
			{"shared try-once", []txlock.Option{txlock.Shared(), txlock.TryOnce()}},
			{"timeout", []txlock.Option{txlock.WithTimeout(time.Minute), txlock.AlsoLock(advisory.KeyInt(14))}},
		}
		for _, set := range sets {
			for _, key := range keys {
				if err := txlock.DoPgx(ctx, pool, key, func(context.Context, pgx.Tx) error { return nil }, set.opts...); err != nil {
					t.Fatalf("DoPgx, %s: %v", set.name, err)
				}
				for _, h := range []*sql.DB{sdb, odb} {
					if err := txlock.Do(ctx, h, key, func(context.Context, *sql.Tx) error { return nil }, set.opts...); err != nil {
						t.Fatalf("Do, %s: %v", set.name, err)
					}
					dctx, cancel := context.WithTimeout(ctx, time.Minute)
					err := txlock.Do(dctx, h, key, func(context.Context, *sql.Tx) error { return nil }, set.opts...)
					cancel()
					if err != nil {
						t.Fatalf("Do under a deadline, %s: %v", set.name, err)
					}
				}
				nothingHeld(t, "txlock, "+set.name)
			}
		}
	})

	t.Run("idem and lease", func(t *testing.T) {
		if err := idem.Migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
		if err := lease.Migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
		mw, err := idem.Middleware(pool, idem.WithScope(func(*http.Request) string { return "tenant-1" }))
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
		for range 2 { // the claim, then the replay
			req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "lockcount-1")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				t.Fatalf("the middleware answered %d, want 201", rec.Code)
			}
		}
		nothingHeld(t, "idem's middleware")
	})
	if t.Failed() {
		return
	}

	sent := log.distinct()
	seen := map[string]bool{}
	replay, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Close(ctx)
	var pid uint32
	if err := replay.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// The count counts: a lock call evaluated for each of two rows takes
	// the lock twice.
	control := sentStatement{"SELECT pg_catalog.pg_try_advisory_lock($1::int8) FROM generate_series(1, 2)", []any{int64(99)}}
	for h, n := range replayCounts(t, ctx, replay, admin, pid, control) {
		if n != 2 {
			t.Fatalf("a lock call over two rows counted %d times on %v, want 2: the count does not count", n, h)
		}
	}
	for _, s := range sent {
		calls := advisoryCall.FindAllString(s.sql, -1)
		for _, fn := range calls {
			seen[fn] = true
		}
		takes := slices.ContainsFunc(calls, func(fn string) bool { return !strings.Contains(fn, "unlock") })
		counts := replayCounts(t, ctx, replay, admin, pid, s)
		if takes && len(counts) == 0 {
			t.Fatalf("the session-level twin of %q (%v) took no lock, whatever the tables held", s.sql, s.args)
		}
		for h, n := range counts {
			if n != 1 {
				t.Fatalf("%q (%v) took the lock on %v %d times: one unlock would leave it held", s.sql, s.args, h, n)
			}
		}
	}
	for fn := range sourceAdvisoryCalls(t) {
		if !seen[fn] {
			t.Errorf("%s is named in the library's source but no statement calling it was sent by the paths of this test: add its path", fn)
		}
	}
	texts := map[string]bool{}
	for _, s := range sent {
		if !texts[s.sql] {
			texts[s.sql] = true
			t.Logf("sent: %s", s.sql)
		}
	}
	t.Logf("%d distinct statements calling advisory-lock functions, each one lock count per key: %v", len(sent), slices.Sorted(maps.Keys(seen)))
}
