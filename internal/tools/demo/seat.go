package demo

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

// Last seat: 50 buyers (5 processes × 10 goroutines) want the one seat
// left. A buyer looks at the seat, thinks for a moment, and buys it.
const thinkTime = 10 * time.Millisecond

var seatScenario = &scenario{
	name:       "seat",
	title:      "2. last seat — 50 buyers, 1 seat",
	anomaly:    "oversold",
	replicas:   5,
	goroutines: 10,
	setup: func(string) string {
		return `DROP TABLE IF EXISTS bookings, seats;
			CREATE TABLE seats (id int PRIMARY KEY, buyer int, version bigint NOT NULL DEFAULT 1);
			CREATE TABLE bookings (id bigserial PRIMARY KEY, seat_id int NOT NULL, buyer int NOT NULL);
			INSERT INTO seats (id) VALUES (42);`
	},
	verify: func(ctx context.Context, conn *pgx.Conn) (int, string, error) {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM bookings WHERE seat_id = 42").Scan(&n)
		return max(n-1, 0), "", err
	},
	strategies: []*strategy{
		{name: "naive", run: buyer(buyNaive)},
		{name: "compare-and-swap", run: buyer(buyCAS)},
		{name: "versioned+retry", run: buyer(buyVersioned)},
		{name: "txlock", run: buyer(buyTxlock)},
	},
}

func buyer(buy func(ctx context.Context, w *replica, buyer int) (outcome, error)) func(context.Context, *replica, int) {
	return func(ctx context.Context, w *replica, g int) {
		w.count(buy(ctx, w, w.replica*w.goroutines+g+1))
	}
}

func book(ctx context.Context, w *replica, buyer int) error {
	_, err := w.db.ExecContext(ctx, "INSERT INTO bookings (seat_id, buyer) VALUES (42, $1)", buyer)
	return err
}

func lookAndBuy(ctx context.Context, db dbtx, buyer int) (outcome, error) {
	var owner *int
	if err := db.QueryRowContext(ctx, "SELECT buyer FROM seats WHERE id = 42").Scan(&owner); err != nil {
		return 0, err
	}
	if owner != nil {
		return skipped, nil
	}
	time.Sleep(thinkTime)
	if _, err := db.ExecContext(ctx, "UPDATE seats SET buyer = $1 WHERE id = 42", buyer); err != nil {
		return 0, err
	}
	_, err := db.ExecContext(ctx, "INSERT INTO bookings (seat_id, buyer) VALUES (42, $1)", buyer)
	return success, err
}

func buyNaive(ctx context.Context, w *replica, buyer int) (outcome, error) {
	return lookAndBuy(ctx, w.db, buyer)
}

var seatKey = advisory.KeyOf("booking:seat-42")

func buyTxlock(ctx context.Context, w *replica, buyer int) (out outcome, err error) {
	err = txlock.Do(ctx, w.db, seatKey, func(ctx context.Context, tx *sql.Tx) error {
		out, err = lookAndBuy(ctx, tx, buyer)
		return err
	}, txlock.WithObserver(w.rec), txlock.WithTimeout(30*time.Second))
	return out, err
}

var seatsTable = versioned.MustTable("seats")

func buyCAS(ctx context.Context, w *replica, buyer int) (outcome, error) {
	time.Sleep(thinkTime)
	res, err := versioned.CompareAndSwap(ctx, w.db, seatsTable, 42,
		[]versioned.Pair{versioned.Eq("buyer", nil)}, versioned.Set("buyer", buyer))
	if err != nil {
		return 0, err
	}
	if res != versioned.Won {
		w.count(conflict, nil) // lost the race cleanly: the seat is someone else's
		return skipped, nil
	}
	return success, book(ctx, w, buyer)
}

func buyVersioned(ctx context.Context, w *replica, buyer int) (outcome, error) {
	won := false
	err := retry.Do(ctx, func(ctx context.Context) error {
		var owner *int
		var version int64
		if err := w.db.QueryRowContext(ctx, "SELECT buyer, version FROM seats WHERE id = 42").
			Scan(&owner, &version); err != nil {
			return err
		}
		if owner != nil {
			return nil
		}
		time.Sleep(thinkTime)
		_, err := versioned.Update(ctx, w.db, seatsTable, 42, version, versioned.Set("buyer", buyer))
		if errors.Is(err, versioned.ErrStale) {
			w.count(conflict, nil)
		}
		won = err == nil
		return err
	}, retry.WithObserver(w.rec))
	if err != nil || !won {
		return skipped, err
	}
	return success, book(ctx, w, buyer)
}
