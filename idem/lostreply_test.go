package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// replyLoser loses the reply to a COMMIT that reached the server: hold
// makes the proxy keep every byte the server sends from then on (the
// statements still reach the server); lose waits until the server has
// committed key's result — seen on a connection of its own, not through
// the proxy — and then cuts every connection through the proxy, the held
// reply with them. The client is left with a COMMIT whose outcome it
// cannot know.
type replyLoser struct {
	t     *testing.T
	db    *pgtest.DB
	proxy *pgtest.Proxy
}

func newReplyLoser(t *testing.T, db *pgtest.DB) *replyLoser {
	return &replyLoser{t: t, db: db, proxy: pgtest.StartProxy(t, db.DSN)}
}

func (l *replyLoser) hold() {
	if err := l.proxy.SetDelay(pgtest.ToClient, time.Hour, 0); err != nil {
		l.t.Error(err)
	}
}

// lose runs in a goroutine of its own while the client waits for its
// COMMIT's reply; it returns once the connections are cut and the proxy
// forwards at once again.
func (l *replyLoser) lose(key string) {
	for count(l.t, l.db, `SELECT count(*) FROM sqlock_idem WHERE key = $1 AND result IS NOT NULL`, key) == 0 {
		time.Sleep(time.Millisecond) // polling for the commit, not timing it
	}
	l.proxy.Cut()
	if err := l.proxy.SetDelay(pgtest.ToClient, 0, 0); err != nil {
		l.t.Error(err)
	}
}

// TestLostCommitReplyIsReplayedOnRetry: the COMMIT that records a key
// reaches the server and commits, and its reply is lost (the connection
// cut after it was sent). The caller learns that the outcome is unknown —
// DoTx's error matches txlock.ErrAmbiguousCommit, the middleware's 503
// says so — and the retry with the same key replays the committed result:
// fn and the handler ran once, the key is neither stuck nor answered 409.
func TestLostCommitReplyIsReplayedOnRetry(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	t.Run("Do", func(t *testing.T) {
		db := newDB(t)
		l := newReplyLoser(t, db)
		pool := openPool(t, l.proxy.DSN, nil)
		runs := 0
		call := func(lose bool) (string, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return "", err
			}
			defer tx.Rollback(ctx)
			v, err := idem.Do(ctx, tx, "", "k", []byte("fp"), func(ctx context.Context) (string, error) {
				runs++
				_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
				return fmt.Sprintf("run %d", runs), err
			})
			if err != nil {
				return "", err
			}
			if lose {
				l.hold()
				done := make(chan struct{})
				go func() { defer close(done); l.lose("k") }()
				defer func() { <-done }()
			}
			return v, tx.Commit(ctx)
		}
		if _, err := call(true); err == nil {
			t.Fatal("a COMMIT whose reply was lost returned no error")
		}
		checkReplayedOnce(t, db, func() (string, error) { return call(false) }, &runs)
	})
	t.Run("DoTx", func(t *testing.T) {
		db := newDB(t)
		l := newReplyLoser(t, db)
		pool := openPool(t, l.proxy.DSN, nil)
		runs := 0
		call := func(key string, lose bool) (string, error) {
			done := make(chan struct{})
			defer func() {
				if lose {
					<-done
				}
			}()
			return idem.DoTx(ctx, pool, "", key, []byte("fp"), func(ctx context.Context, tx pgx.Tx) (string, error) {
				if key != "k" {
					return "warm", nil
				}
				runs++
				_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
				if lose {
					l.hold() // what is read from here on is the reply to store + COMMIT
					go func() { defer close(done); l.lose("k") }()
				}
				return fmt.Sprintf("run %d", runs), err
			})
		}
		// The connection prepares the store's statement now, so that
		// nothing but store and COMMIT is on the wire once the reply is
		// held.
		if _, err := call("warm", false); err != nil {
			t.Fatal(err)
		}
		if _, err := call("k", true); !errors.Is(err, txlock.ErrAmbiguousCommit) {
			t.Fatalf("a COMMIT whose reply was lost: %v, want an error matching txlock.ErrAmbiguousCommit", err)
		}
		checkReplayedOnce(t, db, func() (string, error) { return call("k", false) }, &runs)
	})
	t.Run("Middleware", func(t *testing.T) {
		db := newDB(t)
		l := newReplyLoser(t, db)
		// The default mode, where a key whose first request is in
		// progress is answered 409.
		mw, err := idem.Middleware(openPool(t, l.proxy.DSN, nil), idem.WithScope(func(*http.Request) string { return "" }))
		if err != nil {
			t.Fatal(err)
		}
		var lose atomic.Bool
		done := make(chan struct{})
		var runs atomic.Int32
		srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Idempotency-Key") != "k" {
				return // the warm-up
			}
			n := runs.Add(1)
			tx, _ := idem.TxFrom[pgx.Tx](r.Context())
			if _, err := tx.Exec(r.Context(), `INSERT INTO effects (key) VALUES ('k')`); err != nil {
				t.Error(err)
			}
			if lose.Swap(false) {
				l.hold()
				go func() { defer close(done); l.lose("k") }()
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "run %d", n)
		})))
		defer srv.Close()
		s := &server{Server: srv}
		// The pool's one connection prepares the store's statement now (see
		// DoTx above).
		if r := s.post(t, "", "warm", "x"); r.status != http.StatusOK {
			t.Fatalf("warm-up: %+v", r)
		}
		lose.Store(true)
		first := s.post(t, "", "k", "x")
		<-done
		if first.status != http.StatusServiceUnavailable || !strings.Contains(first.body, "outcome of the request is unknown") {
			t.Fatalf("a COMMIT whose reply was lost: %d %s, want 503 saying the outcome is unknown", first.status, first.body)
		}
		for range 2 {
			r := s.post(t, "", "k", "x")
			if r.status != http.StatusCreated || r.body != "run 1" || r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry: %d %s %v, want the committed 201 replayed", r.status, r.body, r.header)
			}
		}
		if n := runs.Load(); n != 1 || count(t, db, `SELECT count(*) FROM effects`) != 1 {
			t.Fatalf("the handler ran %d times", n)
		}
	})
}

// checkReplayedOnce: retry returns the first run's result twice, without
// running fn again, and the effect exists once.
func checkReplayedOnce(t *testing.T, db *pgtest.DB, retry func() (string, error), runs *int) {
	t.Helper()
	for range 2 {
		if v, err := retry(); err != nil || v != "run 1" {
			t.Fatalf("retry after the lost reply: %q, %v; want run 1's result replayed", v, err)
		}
	}
	if *runs != 1 || count(t, db, `SELECT count(*) FROM effects`) != 1 {
		t.Fatalf("fn ran %d times", *runs)
	}
}

// TestMiddleware503SaysOnlyWhatIsKnown: when the stored response is
// refused (a CHECK constraint), the server skips the COMMIT and the 503
// says that nothing committed — and indeed the key is free, the retry runs
// the handler. (The unknown outcome's 503 is in
// TestLostCommitReplyIsReplayedOnRetry.)
func TestMiddleware503SaysOnlyWhatIsKnown(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`ALTER TABLE sqlock_idem ADD CONSTRAINT refuse_all CHECK (result IS NULL)`)
	s := newServer(t, db, false)
	r := s.post(t, "alice", "k", "charge")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "did not commit") || strings.Contains(r.body, "unknown") {
		t.Fatalf("a refused store: %d %s, want 503 saying the effects did not commit", r.status, r.body)
	}
	if n := count(t, db, `SELECT count(*) FROM effects`) + count(t, db, `SELECT count(*) FROM sqlock_idem`); n != 0 {
		t.Fatalf("%d rows of effects and keys after a COMMIT that did not happen", n)
	}
	db.Exec(`ALTER TABLE sqlock_idem DROP CONSTRAINT refuse_all`)
	if r := s.post(t, "alice", "k", "charge"); r.status != http.StatusCreated || s.runs.Load() != 2 {
		t.Fatalf("retry: %d %s after %d runs, want the handler run again", r.status, r.body, s.runs.Load())
	}
}
