package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

// Payment: the same payment request reaches every replica (the client's
// network retry). Each replica checks whether the order is paid, calls the
// payment provider (a real delay: the race window), records the charge and
// marks the order paid. A second charge for one order is a double charge.
const (
	paymentOrders   = 40
	providerLatency = 15 * time.Millisecond
)

var paymentScenario = &scenario{
	name:       "payment",
	title:      fmt.Sprintf("1. payment — 3 replicas receive the same %d payments (a client's network retry)", paymentOrders),
	anomaly:    "double charges",
	replicas:   3,
	goroutines: 4,
	setup: func(strategy string) string {
		unique := ""
		if strategy == "layered" { // the third layer: the database refuses a second charge
			unique = ", UNIQUE (order_id)"
		}
		return fmt.Sprintf(`DROP TABLE IF EXISTS charges, orders;
			CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, claimed_by int,
				version bigint NOT NULL DEFAULT 1);
			CREATE TABLE charges (id bigserial PRIMARY KEY, order_id int NOT NULL, replica int NOT NULL%s);
			INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, %d) g;`, unique, paymentOrders)
	},
	verify: func(ctx context.Context, conn *pgx.Conn) (int, string, error) {
		var dup, orders, paid int
		err := conn.QueryRow(ctx, `SELECT coalesce(sum(n - 1), 0), count(*),
			(SELECT count(*) FROM orders WHERE status = 'paid') FROM
			(SELECT count(*) n FROM charges GROUP BY order_id) c`).Scan(&dup, &orders, &paid)
		switch {
		case err != nil:
		case orders != paymentOrders:
			err = fmt.Errorf("%d of %d orders charged", orders, paymentOrders)
		case paid != paymentOrders:
			err = fmt.Errorf("%d of %d orders marked paid", paid, paymentOrders)
		}
		return dup, "", err
	},
	strategies: []*strategy{
		{name: "naive", run: forOrders(payNaive)},
		{name: "session lock", run: forOrders(paySessionLock)},
		{name: "txlock", run: forOrders(payTxlock)},
		{name: "versioned+retry", run: forOrders(payVersioned)},
		{name: "layered", run: forOrders(payLayered)},
		{name: "gorm plugin+retry",
			note: `db.Use(gormplugin.New()), Order.Version tagged lock:"version", retry.Wrap(repo.Claim); the claim is db.Model(&o).Updates(…)`,
			run: forOrders(payWithRepo(func(w *replica) orderRepo {
				return gormOrders{db: w.orm, replica: w.replica}
			}))},
		{name: "sqlx+retry",
			note: `the same Order struct (db tags), retry.Wrap(repo.Claim); the claim is sqlxhelpers: h.Update(ctx, "orders", &o, …)`,
			run: forOrders(payWithRepo(func(w *replica) orderRepo {
				return sqlxOrders{db: w.sqlx, h: w.sqlxh, replica: w.replica}
			}))},
	},
}

// forOrders gives goroutine g of every replica the same orders, so each
// order is received by one goroutine per replica at about the same time.
func forOrders(pay func(ctx context.Context, w *replica, order int) (outcome, error)) func(context.Context, *replica, int) {
	return func(ctx context.Context, w *replica, g int) {
		for order := 1 + g; order <= paymentOrders; order += w.goroutines {
			w.count(pay(ctx, w, order))
		}
	}
}

// charge is the side effect: the provider call and the record of it.
func charge(ctx context.Context, db dbtx, w *replica, order int) error {
	time.Sleep(providerLatency)
	_, err := db.ExecContext(ctx, "INSERT INTO charges (order_id, replica) VALUES ($1, $2)", order, w.replica)
	return err
}

// checkAndCharge is the naive handler: look, charge, mark paid.
func checkAndCharge(ctx context.Context, db dbtx, w *replica, order int) (outcome, error) {
	var status string
	if err := db.QueryRowContext(ctx, "SELECT status FROM orders WHERE id = $1", order).Scan(&status); err != nil {
		return 0, err
	}
	if status != "unpaid" {
		return skipped, nil
	}
	if err := charge(ctx, db, w, order); err != nil {
		return 0, err
	}
	_, err := db.ExecContext(ctx, "UPDATE orders SET status = 'paid' WHERE id = $1", order)
	return success, err
}

func payNaive(ctx context.Context, w *replica, order int) (outcome, error) {
	return checkAndCharge(ctx, w.db, w, order)
}

func paymentKey(order int) advisory.Key {
	return advisory.KeyOf(fmt.Sprintf("payment:order-%d", order))
}

// paySessionLock holds a session advisory lock on the order around the
// whole handler (which may include work outside the database).
func paySessionLock(ctx context.Context, w *replica, order int) (out outcome, err error) {
	err = w.locker.Do(ctx, paymentKey(order), func(ctx context.Context) error {
		out, err = checkAndCharge(ctx, w.db, w, order)
		return err
	})
	return out, err
}

// payTxlock runs the handler in one transaction under the order's
// transaction lock.
func payTxlock(ctx context.Context, w *replica, order int) (out outcome, err error) {
	err = txlock.Do(ctx, w.db, paymentKey(order), func(ctx context.Context, tx *sql.Tx) error {
		out, err = checkAndCharge(ctx, tx, w, order)
		return err
	}, txlock.WithObserver(w.rec))
	return out, err
}

// payLayered is the recipe for when a double charge is expensive: a lock so
// replicas take turns, a state check under it, and a unique constraint on
// the charge so that even a lock lost mid-way cannot charge twice.
func payLayered(ctx context.Context, w *replica, order int) (out outcome, err error) {
	err = w.locker.Do(ctx, paymentKey(order), func(ctx context.Context) error {
		out, err = checkAndCharge(ctx, w.db, w, order)
		if pgerror.Code(err) == pgerror.UniqueViolation { // the constraint caught a duplicate
			out, err = conflict, nil
		}
		return err
	})
	return out, err
}

var ordersTable = versioned.MustTable("orders")

// payVersioned claims the order with a versioned state transition before
// charging: the loser's write is stale, its retry re-reads and finds the
// order taken.
func payVersioned(ctx context.Context, w *replica, order int) (outcome, error) {
	claimed := false
	err := retry.Do(ctx, func(ctx context.Context) error {
		var status string
		var version int64
		if err := w.db.QueryRowContext(ctx, "SELECT status, version FROM orders WHERE id = $1", order).
			Scan(&status, &version); err != nil {
			return err
		}
		if status != "unpaid" {
			return nil
		}
		_, err := versioned.Update(ctx, w.db, ordersTable, order, version, versioned.Set("status", "charging"))
		if errors.Is(err, versioned.ErrStale) {
			w.count(conflict, nil)
		}
		claimed = err == nil
		return err
	}, retry.WithObserver(w.rec))
	if err != nil || !claimed {
		return skipped, err
	}
	if err := charge(ctx, w.db, w, order); err != nil {
		return 0, err
	}
	_, err = w.db.ExecContext(ctx, "UPDATE orders SET status = 'paid' WHERE id = $1", order)
	return success, err
}

// payWithRepo is the handler as a GORM or sqlx service writes it: the
// repository's Claim wrapped with retry.Wrap (a stale claim re-reads and
// finds the order taken), then the charge, then MarkPaid. The conflicts in
// the table are the plugin's and the helper's own observe.Stale events.
func payWithRepo(repo func(*replica) orderRepo) func(context.Context, *replica, int) (outcome, error) {
	return func(ctx context.Context, w *replica, order int) (outcome, error) {
		r := repo(w)
		claim := retry.Wrap(r.Claim, retry.WithObserver(w.rec))
		o, err := claim(ctx, order)
		if err != nil || o == nil {
			return skipped, err
		}
		if err := charge(ctx, w.db, w, order); err != nil {
			return 0, err
		}
		return success, r.MarkPaid(ctx, o)
	}
}
