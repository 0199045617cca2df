package txlock_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/txlock"
)

// panicOn is an observer that panics on one outcome.
type panicOn observe.Outcome

func (p panicOn) Observe(_ context.Context, e observe.Event) {
	if e.Outcome == observe.Outcome(p) {
		panic(p)
	}
}

// TestPanicInUserCodeReleasesEverything: a panic in user code — fn, or an
// observer on any event (Acquired, Released, Busy, Timeout) — rolls the
// transaction back, releases its locks and returns its connection to the
// pool, and goes on with the same value. Afterwards no advisory lock is
// left, no connection is checked out, a pgx pool closes (it blocks forever
// on a connection never released), and the key can be locked again.
func TestPanicInUserCodeReleasesEverything(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	admin := db.Pool()
	ctx := context.Background()
	key := advisory.KeyOf("panic-in-user-code")
	type handle struct {
		name  string
		do    func(ctx context.Context, fn func(context.Context) error, opts ...txlock.Option) error
		inUse func() int
		close func()
	}
	open := func(t *testing.T) []handle {
		cfg, err := pgxpool.ParseConfig(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { go pool.Close() }) // the test itself checks that Close returns
		hs := []handle{{bePgxPool, func(ctx context.Context, fn func(context.Context) error, opts ...txlock.Option) error {
			return txlock.DoPgx(ctx, pool, key, func(ctx context.Context, _ pgx.Tx) error { return fn(ctx) }, opts...)
		}, func() int { return int(pool.Stat().AcquiredConns()) }, pool.Close}}
		pcfg, err := pgx.ParseConfig(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		fold := txlock.OpenDB(*pcfg)
		t.Cleanup(func() { fold.Close() })
		for _, h := range []struct {
			name string
			db   *sql.DB
		}{{beSQL, db.OpenSQL()}, {beFold, fold}, {bePQ, openPQ(t, db.DSN)}} {
			hs = append(hs, handle{h.name, func(ctx context.Context, fn func(context.Context) error, opts ...txlock.Option) error {
				return txlock.Do(ctx, h.db, key, func(ctx context.Context, _ *sql.Tx) error { return fn(ctx) }, opts...)
			}, func() int { return h.db.Stats().InUse }, func() { h.db.Close() }})
		}
		return hs
	}
	nop := func(context.Context) error { return nil }
	cases := []struct {
		name string
		fn   func(context.Context) error
		opts []txlock.Option
		// held: the key is held elsewhere during the call.
		held bool
	}{
		{"fn panics", func(context.Context) error { panic(panicOn(0)) }, nil, false},
		{"observer panics on Acquired", nop, []txlock.Option{txlock.WithObserver(panicOn(observe.Acquired))}, false},
		{"observer panics on Released", nop, []txlock.Option{txlock.WithObserver(panicOn(observe.Released))}, false},
		{"observer panics on Released after fn's error", func(context.Context) error { return errBoom },
			[]txlock.Option{txlock.WithObserver(panicOn(observe.Released))}, false},
		{"observer panics on Busy", nop, []txlock.Option{txlock.TryOnce(), txlock.WithObserver(panicOn(observe.Busy))}, true},
		{"observer panics on Timeout", nop, []txlock.Option{txlock.WithTimeout(time.Millisecond), txlock.WithObserver(panicOn(observe.Timeout))}, true},
	}
	for _, h := range open(t) {
		t.Run(h.name, func(t *testing.T) {
			for _, c := range cases {
				func() {
					if c.held {
						defer holdLocks(t, db, false, key).release()
					}
					var err error
					defer func() {
						if r := recover(); r == nil {
							t.Fatalf("%s: no panic; the call returned %v", c.name, err)
						} else if _, ok := r.(panicOn); !ok {
							t.Fatalf("%s: the panic did not go on with its value: %v", c.name, r)
						}
					}()
					err = h.do(ctx, c.fn, c.opts...)
				}()
				if n := h.inUse(); n != 0 {
					t.Fatalf("%s: %d connections still checked out", c.name, n)
				}
				waitNoLocks(t, admin)
				if err := h.do(ctx, nop, txlock.TryOnce()); err != nil {
					t.Fatalf("%s: the key cannot be locked again: %v", c.name, err)
				}
			}
			closed := make(chan struct{})
			go func() { h.close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(time.Minute): // a leaked pgx connection blocks Close forever
				t.Fatal("closing the handle blocked: a connection was never released")
			}
		})
	}
}

func openPQ(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	h, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
