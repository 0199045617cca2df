package retry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jmoiron/sqlx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

// A user writing their own versioned SQL returns the documented sentinel,
// wrapped: that is a stale write, and it is retried like *StaleError.
func TestRetriesWrappedErrStaleSentinel(t *testing.T) {
	for _, stale := range []error{
		versioned.ErrStale,
		fmt.Errorf("update orders: %w", versioned.ErrStale),
		fmt.Errorf("pay: %w", fmt.Errorf("update orders: %w", versioned.ErrStale)),
	} {
		if ok, cause := retry.Default(stale); !ok || cause != "stale" {
			t.Errorf("Default(%v) = %v %q, want true \"stale\"", stale, ok, cause)
		}
		calls := 0
		err := retry.Do(context.Background(), func(context.Context) error {
			if calls++; calls == 1 {
				return stale
			}
			return nil
		}, retry.WithBackoff(retry.Constant(0)))
		if err != nil || calls != 2 {
			t.Errorf("Do with %v: %v after %d calls, want nil after 2", stale, err, calls)
		}
	}
}

// txlock retries a whole transaction whose fn returns a stale error — the
// sentinel wrapped, or a *versioned.StaleError — as its documentation says,
// besides 40001 and 40P01.
func TestTxlockRetriesStaleErrors(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	for name, stale := range map[string]error{
		"wrapped sentinel": fmt.Errorf("update orders: %w", versioned.ErrStale),
		"StaleError":       &versioned.StaleError{Table: "orders", Key: 1, Expected: 1, Op: "update"},
	} {
		t.Run(name, func(t *testing.T) {
			calls := 0
			err := txlock.Do(ctx, db.SQL(), advisory.KeyOf("order:1"), func(ctx context.Context, tx *sql.Tx) error {
				if calls++; calls == 1 {
					return stale
				}
				return nil
			}, txlock.WithRetry(retry.WithBackoff(retry.Constant(0))))
			if err != nil || calls != 2 {
				t.Fatalf("%v after %d runs of fn, want nil after 2", err, calls)
			}
			calls = 0
			err = txlock.Do(ctx, db.SQL(), advisory.KeyOf("order:1"), func(ctx context.Context, tx *sql.Tx) error {
				calls++
				return stale
			}, txlock.WithRetry(retry.WithBackoff(retry.Constant(0))))
			if calls != lockedtx.DefaultMaxAttempts || !errors.Is(err, retry.ErrExhausted) || !errors.Is(err, versioned.ErrStale) {
				t.Fatalf("%v after %d runs of fn, want exhausted after %d", err, calls, lockedtx.DefaultMaxAttempts)
			}
		})
	}
}

type nestedOrder struct {
	ID         int64  `db:"id"`
	CustomerID int64  `db:"customer_id"`
	Status     string `db:"status"`
	Version    int64  `db:"version" gorm:"not null;default:1" lock:"version"`
}

func (nestedOrder) TableName() string { return "orders" }

// An outer retry.Do around the locked transactions of gormplugin and
// sqlxhelpers — which retry by themselves — runs fn as many times as the
// inner retry allows, not that many times the outer's attempts: the inner
// *retry.ExhaustedError is final. Each fn makes a real stale write (a copy
// of the row one version behind) on a real server.
func TestOuterRetryDoesNotMultiplyInnerRetries(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL,
		status text NOT NULL, version bigint NOT NULL DEFAULT 1);
		INSERT INTO orders VALUES (1, 7, 'new', 2)`)
	stale := nestedOrder{ID: 1, CustomerID: 7, Status: "new", Version: 1} // read before the row's last write
	ctx := context.Background()
	key := advisory.KeyOf("order:1")
	fast := txlock.WithRetry(retry.WithBackoff(retry.Constant(0)))
	outer := []retry.Option{retry.WithBackoff(retry.Constant(0)), retry.WithMaxAttempts(10)}

	check := func(t *testing.T, err error, outerRuns, fnRuns int) {
		t.Helper()
		if outerRuns != 1 || fnRuns != lockedtx.DefaultMaxAttempts {
			t.Fatalf("outer ran %d times, fn %d; want 1 and %d", outerRuns, fnRuns, lockedtx.DefaultMaxAttempts)
		}
		var se *versioned.StaleError
		if !errors.Is(err, retry.ErrExhausted) || !errors.As(err, &se) || se.Table != "orders" {
			t.Fatalf("want an exhausted stale error on orders, got %v", err)
		}
	}

	t.Run("sqlxhelpers.Do", func(t *testing.T) {
		db := sqlx.NewDb(pg.SQL(), "pgx")
		h, err := sqlxhelpers.New(db)
		if err != nil {
			t.Fatal(err)
		}
		outerRuns, fnRuns := 0, 0
		err = retry.Do(ctx, func(ctx context.Context) error {
			outerRuns++
			return sqlxhelpers.Do(ctx, db, key, func(ctx context.Context, tx *sqlx.Tx) error {
				fnRuns++
				o := stale
				o.Status = "paid"
				return h.On(tx).Update(ctx, "orders", &o)
			}, fast)
		}, outer...)
		check(t, err, outerRuns, fnRuns)
	})

	t.Run("gormplugin.Transaction", func(t *testing.T) {
		db, err := gorm.Open(postgres.New(postgres.Config{Conn: pg.SQL()}), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Use(gormplugin.New()); err != nil {
			t.Fatal(err)
		}
		outerRuns, fnRuns := 0, 0
		err = retry.Do(ctx, func(ctx context.Context) error {
			outerRuns++
			return gormplugin.Transaction(ctx, db, key, func(tx *gorm.DB) error {
				fnRuns++
				o := stale
				return tx.Model(&o).Update("status", "paid").Error
			}, fast)
		}, outer...)
		check(t, err, outerRuns, fnRuns)
	})

	var status string
	var version int64
	if err := pg.SQL().QueryRowContext(ctx, "SELECT status, version FROM orders WHERE id = 1").Scan(&status, &version); err != nil {
		t.Fatal(err)
	}
	if status != "new" || version != 2 {
		t.Fatalf("a stale write changed the row: %s at version %d", status, version)
	}
}
