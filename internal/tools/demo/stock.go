package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

// Stock: 200 concurrent orders (4 processes × 50 goroutines) for a product
// with 100 in stock. An order checks the stock, reserves it a moment later,
// and decrements.
const (
	initialStock = 100
	reserveTime  = 5 * time.Millisecond
)

var stockScenario = &scenario{
	name:       "stock",
	title:      fmt.Sprintf("3. stock — 200 concurrent orders, %d in stock", initialStock),
	anomaly:    "oversold",
	replicas:   4,
	goroutines: 50,
	setup: func(string) string {
		return fmt.Sprintf(`DROP TABLE IF EXISTS products;
			CREATE TABLE products (id int PRIMARY KEY, stock int NOT NULL, sold int NOT NULL DEFAULT 0,
				version bigint NOT NULL DEFAULT 1);
			INSERT INTO products (id, stock) VALUES (7, %d);`, initialStock)
	},
	verify: func(ctx context.Context, conn *pgx.Conn) (int, string, error) {
		var stock, sold int
		if err := conn.QueryRow(ctx, "SELECT stock, sold FROM products WHERE id = 7").Scan(&stock, &sold); err != nil {
			return 0, "", err
		}
		if stock+sold != initialStock {
			return 0, "", fmt.Errorf("stock %d + sold %d != %d: a lost update", stock, sold, initialStock)
		}
		return max(sold-initialStock, 0), fmt.Sprintf(" (stock %d)", stock), nil
	},
	strategies: []*strategy{
		{name: "naive", run: order(orderNaive)},
		{name: "compare-and-swap", run: order(orderCAS)},
		{name: "versioned+retry", run: order(orderVersioned)},
		{name: "session lock", run: order(orderSessionLock)},
		{name: "txlock", run: order(orderTxlock)},
		{name: "gorm plugin+retry",
			note: `db.Use(gormplugin.New()), Product.Version tagged lock:"version", retry.Wrap(repo.Sell); the sale is db.Save(&p)`,
			run: order(sellWithRepo(func(w *replica) productRepo {
				return gormProducts{db: w.orm}
			}))},
		{name: "sqlx+retry",
			note: `the same Product struct (db tags), retry.Wrap(repo.Sell); the sale is sqlxhelpers: h.Update(ctx, "products", &p)`,
			run: order(sellWithRepo(func(w *replica) productRepo {
				return sqlxProducts{db: w.sqlx, h: w.sqlxh}
			}))},
	},
}

func order(place func(ctx context.Context, w *replica) (outcome, error)) func(context.Context, *replica, int) {
	return func(ctx context.Context, w *replica, _ int) { w.count(place(ctx, w)) }
}

// checkAndDecrement is the naive order: look at the stock, reserve, take one.
func checkAndDecrement(ctx context.Context, db dbtx) (outcome, error) {
	var stock int
	if err := db.QueryRowContext(ctx, "SELECT stock FROM products WHERE id = 7").Scan(&stock); err != nil {
		return 0, err
	}
	if stock <= 0 {
		return skipped, nil
	}
	time.Sleep(reserveTime)
	_, err := db.ExecContext(ctx, "UPDATE products SET stock = stock - 1, sold = sold + 1 WHERE id = 7")
	return success, err
}

func orderNaive(ctx context.Context, w *replica) (outcome, error) {
	return checkAndDecrement(ctx, w.db)
}

var productKey = advisory.KeyOf("stock:product-7")

func orderSessionLock(ctx context.Context, w *replica) (out outcome, err error) {
	err = w.locker.Do(ctx, productKey, func(ctx context.Context) error {
		out, err = checkAndDecrement(ctx, w.db)
		return err
	})
	return out, err
}

func orderTxlock(ctx context.Context, w *replica) (out outcome, err error) {
	err = txlock.Do(ctx, w.db, productKey, func(ctx context.Context, tx *sql.Tx) error {
		out, err = checkAndDecrement(ctx, tx)
		return err
	}, txlock.WithObserver(w.rec), txlock.WithTimeout(30*time.Second))
	return out, err
}

var productsTable = versioned.MustTable("products")

// orderCAS swaps the stock it read for one less; a lost swap re-reads.
func orderCAS(ctx context.Context, w *replica) (outcome, error) {
	for {
		var stock, sold int
		if err := w.db.QueryRowContext(ctx, "SELECT stock, sold FROM products WHERE id = 7").Scan(&stock, &sold); err != nil {
			return 0, err
		}
		if stock <= 0 {
			return skipped, nil
		}
		time.Sleep(reserveTime)
		res, err := versioned.CompareAndSwap(ctx, w.db, productsTable, 7,
			[]versioned.Pair{versioned.Eq("stock", stock)},
			versioned.Set("stock", stock-1), versioned.Set("sold", sold+1))
		if err != nil || res == versioned.Won {
			return success, err
		}
		w.count(conflict, nil)
	}
}

func orderVersioned(ctx context.Context, w *replica) (outcome, error) {
	out := skipped
	err := retry.Do(ctx, func(ctx context.Context) error {
		var stock, sold int
		var version int64
		if err := w.db.QueryRowContext(ctx, "SELECT stock, sold, version FROM products WHERE id = 7").
			Scan(&stock, &sold, &version); err != nil {
			return err
		}
		if stock <= 0 {
			out = skipped
			return nil
		}
		time.Sleep(reserveTime)
		_, err := versioned.Update(ctx, w.db, productsTable, 7, version,
			versioned.Set("stock", stock-1), versioned.Set("sold", sold+1))
		if errors.Is(err, versioned.ErrStale) {
			w.count(conflict, nil)
		}
		out = success
		return err
	}, stockRetry(w)...)
	return out, err
}

// stockRetry is the retry policy of the optimistic strategies: 200 buyers
// of one row need more than the default 10 attempts, and short backoffs.
func stockRetry(w *replica) []retry.Option {
	return []retry.Option{retry.WithObserver(w.rec), retry.WithMaxAttempts(1000),
		retry.WithBackoff(retry.Exponential(time.Millisecond, 20*time.Millisecond))}
}

// sellWithRepo is the order handler as a GORM or sqlx service writes it:
// the repository's Sell wrapped with retry.Wrap.
func sellWithRepo(repo func(*replica) productRepo) func(context.Context, *replica) (outcome, error) {
	return func(ctx context.Context, w *replica) (outcome, error) {
		sell := retry.Wrap(repo(w).Sell, stockRetry(w)...)
		sold, err := sell(ctx, 7)
		if err != nil || !sold {
			return skipped, err
		}
		return success, nil
	}
}
