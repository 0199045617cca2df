package combotest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	"go.uber.org/goleak"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/txlock"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// execer runs a statement on a pool or in a transaction, whatever the
// driver.
type execer interface {
	exec(ctx context.Context, q string, args ...any) error
	queryInt(ctx context.Context, q string, args ...any) (int64, error)
}

type sqlQ interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

type onSQL struct{ q sqlQ }

func (s onSQL) exec(ctx context.Context, q string, args ...any) error {
	_, err := s.q.ExecContext(ctx, q, args...)
	return err
}

func (s onSQL) queryInt(ctx context.Context, q string, args ...any) (n int64, err error) {
	err = s.q.QueryRowContext(ctx, q, args...).Scan(&n)
	return n, err
}

// onPgx adapts a pgx pool or transaction.
type onPgx struct {
	run func(ctx context.Context, q string, args ...any) error
	row func(ctx context.Context, q string, args ...any) pgx.Row
}

func pgxPoolQ(p *pgxpool.Pool) onPgx {
	return onPgx{func(ctx context.Context, q string, args ...any) error {
		_, err := p.Exec(ctx, q, args...)
		return err
	}, p.QueryRow}
}

func pgxTxQ(tx pgx.Tx) onPgx {
	return onPgx{func(ctx context.Context, q string, args ...any) error {
		_, err := tx.Exec(ctx, q, args...)
		return err
	}, tx.QueryRow}
}

func (p onPgx) exec(ctx context.Context, q string, args ...any) error {
	return p.run(ctx, q, args...)
}

func (p onPgx) queryInt(ctx context.Context, q string, args ...any) (n int64, err error) {
	err = p.row(ctx, q, args...).Scan(&n)
	return n, err
}

// account is a versioned row for sqlxhelpers.
type account struct {
	ID      int64 `db:"id"`
	Balance int64 `db:"balance"`
	Version int64 `db:"version" lock:"version"`
}

// handle is one pool with every piece the docs say works on it.
type handle struct {
	name   string
	pool   execer
	locker *advisory.Locker
	// tx runs fn in a txlock transaction on the pool.
	tx func(ctx context.Context, key advisory.Key, fn func(context.Context, execer) error) error
	// sqlx is nil where sqlx does not apply (pgxpool).
	sqlx   *sqlxhelpers.Helper
	sqlxDB *sqlx.DB
	inUse  func() int
}

func handles(t *testing.T, db *pgtest.DB) []handle {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	opts := []advisory.Option{advisory.WithTimeout(time.Minute)}
	onSQLDB := func(name, driver string, h *sql.DB) handle {
		t.Cleanup(func() { h.Close() })
		h.SetMaxOpenConns(8)
		x := sqlx.NewDb(h, driver)
		helper, err := sqlxhelpers.New(x)
		if err != nil {
			t.Fatal(err)
		}
		return handle{
			name:   name,
			pool:   onSQL{h},
			locker: advisory.New(h, opts...),
			tx: func(ctx context.Context, key advisory.Key, fn func(context.Context, execer) error) error {
				return txlock.Do(ctx, h, key, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, onSQL{tx}) },
					txlock.WithTimeout(time.Minute))
			},
			sqlx: helper, sqlxDB: x,
			inUse: func() int { return h.Stats().InUse },
		}
	}
	pq, err := sql.Open("postgres", db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pool := db.OpenPool(func(c *pgxpool.Config) { c.MaxConns = 8 })
	return []handle{
		onSQLDB("txlock.OpenDB", "pgx", txlock.OpenDB(*cfg)),
		onSQLDB("pgx-stdlib", "pgx", stdlib.OpenDB(*cfg)),
		onSQLDB("lib/pq", "postgres", pq),
		{
			name:   "pgxpool",
			pool:   pgxPoolQ(pool),
			locker: advisory.NewPool(pool, opts...),
			tx: func(ctx context.Context, key advisory.Key, fn func(context.Context, execer) error) error {
				return txlock.DoPgx(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, pgxTxQ(tx)) },
					txlock.WithTimeout(time.Minute))
			},
			inUse: func() int { return int(pool.Stat().AcquiredConns()) },
		},
	}
}

// TestRecommendedPiecesCombine: on one pool of each kind the docs claim —
// txlock.OpenDB (the pool the guide recommends for txlock), pgx's stdlib,
// lib/pq and pgxpool — advisory session locks, txlock transactions and
// sqlxhelpers' locked transactions with a versioned Update inside run side
// by side on one key, and exclude each other: session and transaction
// advisory locks share one lock space, so unguarded read-modify-write
// increments under any of them lose nothing. Asked for from inside
// another's function, with its context, on the same pool, each refuses at
// once with ErrAlreadyHeld instead of waiting on itself. Afterwards no lock
// is left and no connection is checked out.
func TestRecommendedPiecesCombine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	db := pgtest.New(t)
	db.Exec("CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL DEFAULT 1)")
	admin := db.Pool()
	for i, h := range handles(t, db) {
		t.Run(h.name, func(t *testing.T) {
			ctx := context.Background()
			id := int64(i + 1)
			db.Exec("INSERT INTO accounts (id, balance) VALUES ($1, 0)", id)
			key := advisory.KeyOf(fmt.Sprintf("account:%d", id))
			// increment is a read-modify-write that only a lock makes safe.
			increment := func(ctx context.Context, e execer) error {
				n, err := e.queryInt(ctx, "SELECT balance FROM accounts WHERE id = $1", id)
				if err != nil {
					return err
				}
				return e.exec(ctx, "UPDATE accounts SET balance = $1, version = version + 1 WHERE id = $2", n+1, id)
			}
			ways := map[string]func(ctx context.Context) error{
				"advisory.Do": func(ctx context.Context) error {
					return h.locker.Do(ctx, key, func(ctx context.Context) error { return increment(ctx, h.pool) })
				},
				"txlock": func(ctx context.Context) error { return h.tx(ctx, key, increment) },
			}
			if h.sqlx != nil {
				ways["sqlxhelpers.Do+Update"] = func(ctx context.Context) error {
					return h.sqlx.Do(ctx, key, func(ctx context.Context, tx *sqlx.Tx) error {
						var a account
						if err := tx.GetContext(ctx, &a, "SELECT id, balance, version FROM accounts WHERE id = $1", id); err != nil {
							return err
						}
						a.Balance++
						return h.sqlx.On(tx).Update(ctx, "accounts", &a)
					}, txlock.WithTimeout(time.Minute))
				}
			}
			const workers, each = 4, 12
			var wg sync.WaitGroup
			errs := make(chan error, workers*each)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := w
					for range each {
						for name, way := range ways { // map order: a random mix
							if n%len(ways) == 0 {
								if err := way(ctx); err != nil {
									errs <- fmt.Errorf("%s: %w", name, err)
								}
							}
							n++
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var balance, version int64
			if err := admin.QueryRow(ctx, "SELECT balance, version FROM accounts WHERE id = $1", id).Scan(&balance, &version); err != nil {
				t.Fatal(err)
			}
			if balance != workers*each || version != workers*each+1 {
				t.Fatalf("balance %d, version %d after %d increments: an update was lost", balance, version, workers*each)
			}

			// Nested on the same pool, with the enclosing function's
			// context: refused at once, never a wait on oneself.
			nop := func(context.Context, execer) error { return nil }
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, advisory.ErrAlreadyHeld) {
					t.Errorf("%s: %v, want an error matching advisory.ErrAlreadyHeld", what, err)
				}
			}
			err := h.locker.Do(ctx, key, func(ctx context.Context) error {
				check("txlock inside advisory.Do", h.tx(ctx, key, nop))
				if h.sqlx != nil {
					check("sqlxhelpers.Do inside advisory.Do", h.sqlx.Do(ctx, key, func(context.Context, *sqlx.Tx) error { return nil }))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			err = h.tx(ctx, key, func(ctx context.Context, _ execer) error {
				_, err := h.locker.TryLock(ctx, key)
				check("advisory.TryLock inside txlock", err)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if h.sqlx != nil {
				err = h.sqlx.Do(ctx, key, func(ctx context.Context, _ *sqlx.Tx) error {
					check("advisory.Lock inside sqlxhelpers.Do", h.locker.Do(ctx, key, func(context.Context) error { return nil }))
					check("txlock inside sqlxhelpers.Do", h.tx(ctx, key, nop))
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if n := h.inUse(); n != 0 {
				t.Fatalf("%d connections still checked out", n)
			}
			waitNoLocks(t, admin)
		})
	}
}

// waitNoLocks waits until the test's database holds no advisory lock (a
// closed connection's session ends asynchronously on the server). The bound
// is the test's own deadline.
func waitNoLocks(t *testing.T, admin *pgxpool.Pool) {
	t.Helper()
	for {
		var n int
		if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if dl, ok := t.Deadline(); ok && time.Until(dl) < 5*time.Second {
			t.Fatalf("%d advisory locks left", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTimeoutOptionsShareOneMeaning: every timeout option of the library
// takes a positive bound and nothing else. Zero and negative durations are
// refused with an error matching sqlock.ErrInvalidOption (txlock's
// ErrInvalidOption wraps it) before anything is sent — never read as "wait
// forever" or "the default" — and a positive one is accepted.
func TestTimeoutOptionsShareOneMeaning(t *testing.T) {
	db := pgtest.New(t)
	h := db.OpenSQL()
	pool := db.Pool()
	ctx := context.Background()
	key := advisory.KeyOf("timeout-meaning")
	uses := map[string]func(d time.Duration) error{
		"advisory.WithTimeout": func(d time.Duration) error {
			return advisory.New(h, advisory.WithTimeout(d)).Do(ctx, key, func(context.Context) error { return nil })
		},
		"advisory.WithReleaseTimeout": func(d time.Duration) error {
			return advisory.NewPool(pool, advisory.WithReleaseTimeout(d)).Do(ctx, key, func(context.Context) error { return nil })
		},
		"advisory.WithKeepalive": func(d time.Duration) error {
			return advisory.New(h, advisory.WithKeepalive(d)).Do(ctx, key, func(context.Context) error { return nil })
		},
		"txlock.WithTimeout (database/sql)": func(d time.Duration) error {
			return txlock.Do(ctx, h, key, func(context.Context, *sql.Tx) error { return nil }, txlock.WithTimeout(d))
		},
		"txlock.WithTimeout (pgx)": func(d time.Duration) error {
			return txlock.DoPgx(ctx, pool, key, func(context.Context, pgx.Tx) error { return nil }, txlock.WithTimeout(d))
		},
	}
	for name, use := range uses {
		for _, d := range []time.Duration{0, -time.Nanosecond, -time.Second} {
			before := h.Stats().OpenConnections + int(pool.Stat().TotalConns())
			err := use(d)
			if !errors.Is(err, sqlock.ErrInvalidOption) {
				t.Errorf("%s(%v): %v, want an error matching sqlock.ErrInvalidOption", name, d, err)
			}
			if after := h.Stats().OpenConnections + int(pool.Stat().TotalConns()); after != before {
				t.Errorf("%s(%v): a connection was opened for a refused option", name, d)
			}
		}
		if err := use(time.Second); err != nil {
			t.Errorf("%s(1s): %v", name, err)
		}
	}
}
