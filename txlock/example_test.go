package txlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

// Book seat 42 at most once, however many replicas try at the same moment.
// The function re-reads the seat inside the transaction: it may run again
// after a serialization failure or a deadlock.
func ExampleDo() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	err = txlock.Do(ctx, db, advisory.KeyOf("booking:seat-42"), func(ctx context.Context, tx *sql.Tx) error {
		var taken bool
		if err := tx.QueryRowContext(ctx, "SELECT taken FROM seats WHERE id = 42").Scan(&taken); err != nil {
			return err
		}
		if taken {
			return errors.New("seat 42 is taken")
		}
		_, err := tx.ExecContext(ctx, "UPDATE seats SET taken = true, customer = $1 WHERE id = 42", "c-1001")
		return err
	}, txlock.WithTimeout(2*time.Second))
	switch {
	case errors.Is(err, txlock.ErrTimeout):
		log.Print("busy: try again later")
	case errors.Is(err, txlock.ErrAmbiguousCommit):
		log.Print("the booking may or may not have been saved: check before retrying")
	case err != nil:
		log.Print(err)
	}
}

// With pgx, BEGIN carries the lock: the locked transaction costs the same
// round trips as an unlocked one.
func ExampleDoPgx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	orderID := int64(7)
	err = txlock.DoPgx(ctx, pool, advisory.KeyPair(1, int32(orderID)), func(ctx context.Context, tx pgx.Tx) error {
		var stock int
		if err := tx.QueryRow(ctx, "SELECT stock FROM items WHERE id = $1", orderID).Scan(&stock); err != nil {
			return err
		}
		if stock == 0 {
			return errors.New("sold out")
		}
		_, err := tx.Exec(ctx, "UPDATE items SET stock = $1 WHERE id = $2", stock-1, orderID)
		return err
	})
	if err != nil {
		log.Print(err)
	}
}

// A transfer locks both accounts. Whatever order callers name them in, the
// locks are taken in one canonical order, so two opposite transfers cannot
// deadlock.
func ExampleAlsoLock() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	from, to, amount := int32(1), int32(2), 500
	err = txlock.Do(ctx, db, advisory.KeyPair(10, from), func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", amount, from); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, to)
		return err
	}, txlock.AlsoLock(advisory.KeyPair(10, to)))
	if err != nil {
		log.Print(err)
	}
}

// A job that must not run twice at once, and need not wait: if another
// replica is on it, skip.
func ExampleTryOnce() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	err = txlock.DoPgx(ctx, pool, advisory.KeyOf("job:nightly-invoices"), func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO invoices (customer, total) SELECT customer, sum(amount) FROM usage GROUP BY customer")
		return err
	}, txlock.TryOnce())
	if errors.Is(err, txlock.ErrNotAcquired) {
		fmt.Println("another replica is running the job")
		return
	}
	if err != nil {
		log.Print(err)
	}
}

// Open the *sql.DB with OpenDB and Do folds the lock into BEGIN, as DoPgx
// does: 3 round trips for BEGIN, one statement and COMMIT instead of 4.
func ExampleOpenDB() {
	cfg, err := pgx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	db := txlock.OpenDB(*cfg)
	defer db.Close()

	err = txlock.Do(context.Background(), db, advisory.KeyInt(42), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 42")
		return err
	})
	if err != nil {
		log.Print(err)
	}
}

// Lock waits that time out are retried only when asked; here up to 10
// attempts in all, and the observer logs the retries.
func ExampleWithRetry() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	err = txlock.DoPgx(ctx, pool, advisory.KeyOf("report:daily"), func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "REFRESH MATERIALIZED VIEW daily_report")
		return err
	}, txlock.WithTimeout(500*time.Millisecond),
		txlock.WithRetry(retry.RetryLockTimeout(), retry.WithMaxAttempts(10)))
	if err != nil {
		log.Print(err)
	}
}

// A job holds a session lock on an order; deep inside, a repository asks
// for a locked transaction on the same order through the same pool. That
// request would run on another connection and wait for the job's own lock;
// with the job's context it is refused at once instead.
func ExampleErrAlreadyHeld() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	key := advisory.KeyOf("order:7")

	err = advisory.NewPool(pool).Do(ctx, key, func(ctx context.Context) error {
		return txlock.DoPgx(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE orders SET state = 'shipped' WHERE id = 7")
			return err
		})
	})
	if errors.Is(err, txlock.ErrAlreadyHeld) {
		log.Print("the job already holds order 7: do the update on the job's own connection or drop the inner lock")
	}
}

// An optimistic write that queues when its key turns hot. The first attempt
// runs on the *sql.DB with no transaction and no lock; here another writer
// moved the row between its read and its write (UPDATE matched 0 rows), so
// the second attempt re-reads and writes in a transaction holding the
// key's advisory lock. (A mock database stands in for PostgreSQL, to show
// the statements; on txlock.OpenDB the lock travels with BEGIN.)
func ExampleDoOptimistic() {
	db, mock, _ := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	defer db.Close()
	const read = `SELECT stock, version FROM items WHERE id = $1`
	const write = `UPDATE "items" SET "stock" = $1, "version" = "version" + 1 WHERE "id" = $2 AND "version" = $3`
	mock.ExpectQuery(read).WithArgs(7).WillReturnRows(sqlmock.NewRows([]string{"stock", "version"}).AddRow(10, 3))
	mock.ExpectExec(write).WithArgs(int64(9), 7, 3).WillReturnResult(sqlmock.NewResult(0, 0)) // stale
	mock.ExpectBegin()
	mock.ExpectExec(`SET LOCAL lock_timeout = '5000ms';SELECT pg_catalog.pg_advisory_xact_lock(7)`).WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectQuery(read).WithArgs(7).WillReturnRows(sqlmock.NewRows([]string{"stock", "version"}).AddRow(8, 4))
	mock.ExpectExec(write).WithArgs(int64(7), 7, 4).WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectCommit()

	items := versioned.MustTable("items")
	err := txlock.DoOptimistic(context.Background(), db, advisory.KeyInt(7), func(ctx context.Context, q txlock.Querier) error {
		_, locked := q.(*sql.Tx)
		fmt.Println("attempt in the locked transaction:", locked)
		var stock, version int64
		if err := q.QueryRowContext(ctx, read, 7).Scan(&stock, &version); err != nil {
			return err
		}
		if stock == 0 {
			return retry.Stop(errors.New("sold out"))
		}
		_, err := versioned.Update(ctx, q, items, 7, version, versioned.Set("stock", stock-1))
		return err
	})
	fmt.Println(err, mock.ExpectationsWereMet())
	// Output:
	// attempt in the locked transaction: false
	// attempt in the locked transaction: true
	// <nil> <nil>
}

// A HotKeys lives beside the handle its DoOptimistic calls share, so that
// while one of them queues on a key, new calls queue too instead of
// barging past. (A mock database stands in for PostgreSQL; nobody competes here, so
// the one attempt is lock-free.)
func ExampleWithHotKeys() {
	db, mock, _ := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	defer db.Close()
	mock.ExpectExec(`UPDATE "items" SET "stock" = $1, "version" = "version" + 1 WHERE "id" = $2 AND "version" = $3`).
		WithArgs(int64(9), 7, 3).WillReturnResult(sqlmock.NewResult(0, 1))

	type store struct {
		db  *sql.DB
		hot txlock.HotKeys // one per handle; the zero value is ready
	}
	s := &store{db: db}
	items := versioned.MustTable("items")
	err := txlock.DoOptimistic(context.Background(), s.db, advisory.KeyInt(7), func(ctx context.Context, q txlock.Querier) error {
		_, err := versioned.Update(ctx, q, items, 7, 3, versioned.Set("stock", int64(9)))
		return err
	}, txlock.WithHotKeys(&s.hot))
	fmt.Println(err, mock.ExpectationsWereMet())
	// Output: <nil> <nil>
}
