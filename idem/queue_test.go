package idem_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// waitUntilQueued returns once a session of db's database waits on a lock
// (the second claim, queued on the unique index behind the first
// request's transaction), as pg_stat_activity shows it.
func waitUntilQueued(t *testing.T, db *pgtest.DB) {
	t.Helper()
	const q = `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'transactionid'`
	for count(t, db, q) == 0 {
		time.Sleep(time.Millisecond) // polling for the wait, not timing it
	}
}

// TestQueuedRetryWithAnotherPayloadIsKeyReused: the first request with a
// key is held inside fn (or the handler); a second with the same key and
// another payload queues behind it on the unique index (pg_stat_activity
// shows it waiting); when the first commits, the second is ErrKeyReused —
// 422 from the middleware — and not the first one's replay. Do, DoTx, and
// the middleware in its waiting mode.
func TestQueuedRetryWithAnotherPayloadIsKeyReused(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	// queued runs first (which must block on release after closing
	// inside) and then second, and checks what second returned.
	queued := func(t *testing.T, db *pgtest.DB, first func(inside, release chan struct{}) error, second func() error) {
		inside, release := make(chan struct{}), make(chan struct{})
		firstDone := make(chan error, 1)
		go func() { firstDone <- first(inside, release) }()
		<-inside
		secondDone := make(chan error, 1)
		go func() { secondDone <- second() }()
		waitUntilQueued(t, db)
		select {
		case err := <-secondDone:
			t.Fatalf("the second request returned while the first was in progress: %v", err)
		default:
		}
		close(release)
		if err := <-firstDone; err != nil {
			t.Fatalf("first: %v", err)
		}
		if err := <-secondDone; !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("second, another payload queued behind the first: %v, want ErrKeyReused", err)
		}
		if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
			t.Fatalf("%d effects, want the first's 1", n)
		}
	}
	var ran atomic.Bool
	held := func(inside, release chan struct{}, insert func() error) (string, error) {
		close(inside)
		<-release
		return "first", insert()
	}
	secondFn := func(context.Context) (string, error) { ran.Store(true); return "second", nil }
	t.Run("Do", func(t *testing.T) {
		db := newDB(t)
		pool := db.Pool()
		queued(t, db, func(inside, release chan struct{}) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := idem.Do(ctx, tx, "", "k", []byte("10 EUR"), func(ctx context.Context) (string, error) {
					return held(inside, release, func() error { _, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`); return err })
				})
				return err
			})
		}, func() error {
			_, err := pgxTxDo(ctx, pool, "k", secondFn) // fingerprint "fp"
			return err
		})
	})
	t.Run("DoTx", func(t *testing.T) {
		db := newDB(t)
		pool := db.Pool()
		queued(t, db, func(inside, release chan struct{}) error {
			_, err := idem.DoTx(ctx, pool, "", "k", []byte("10 EUR"), func(ctx context.Context, tx pgx.Tx) (string, error) {
				return held(inside, release, func() error { _, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`); return err })
			})
			return err
		}, func() error {
			_, err := idem.DoTx(ctx, pool, "", "k", []byte("1000 EUR"), func(ctx context.Context, _ pgx.Tx) (string, error) { return secondFn(ctx) })
			return err
		})
	})
	t.Run("Middleware", func(t *testing.T) {
		db := newDB(t)
		// holds hands the first request's channels to its handler; a
		// request that finds none is not the first, and must not run.
		holds := make(chan [2]chan struct{}, 1)
		s := serveBehind(t, db, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var h [2]chan struct{}
			select {
			case h = <-holds:
			default:
				ran.Store(true)
				return
			}
			if _, err := held(h[0], h[1], func() error {
				tx, _ := idem.TxFrom[pgx.Tx](r.Context())
				_, err := tx.Exec(r.Context(), `INSERT INTO effects (key) VALUES ('k')`)
				return err
			}); err != nil {
				t.Error(err)
			}
			w.WriteHeader(http.StatusCreated)
		}), idem.WithWait())
		statusErr := func(r response, want int) error {
			if r.status == want {
				return nil
			}
			if r.status == http.StatusUnprocessableEntity {
				return idem.ErrKeyReused
			}
			return errors.New(http.StatusText(r.status) + ": " + r.body)
		}
		queued(t, db, func(inside, release chan struct{}) error {
			holds <- [2]chan struct{}{inside, release}
			return statusErr(s.post(t, "", "k", "transfer 10"), http.StatusCreated)
		}, func() error {
			return statusErr(s.post(t, "", "k", "transfer 1000"), 0)
		})
	})
	if ran.Load() {
		t.Fatal("a queued request with another payload ran")
	}
}
