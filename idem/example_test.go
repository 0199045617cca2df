package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/jmoiron/sqlx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/txlock"
)

// The examples use a table of their own, so they leave nothing in the way
// of a program's sqlock_idem, and a key of their own run.
var exampleTable = idem.WithTable("example_idem")

func exampleKey(name string) string {
	return fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
}

func examplePool() *pgxpool.Pool {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	if err := idem.Migrate(ctx, pool, exampleTable); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_charges (id bigserial PRIMARY KEY, amount int)`); err != nil {
		log.Fatal(err)
	}
	return pool
}

type chargeResult struct {
	ChargeID int64 `json:"charge_id"`
	Amount   int   `json:"amount"`
}

// Do records the key in the same pgx transaction as the charge: a client
// retrying a request whose response it never saw gets the first result
// back, and is charged once.
func ExampleDo() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	key := exampleKey("order-17") // the client's Idempotency-Key

	charge := func() chargeResult {
		var res chargeResult
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = idem.Do(ctx, tx, "customer-42", key, []byte("charge 1000"),
				func(ctx context.Context) (chargeResult, error) {
					r := chargeResult{Amount: 1000}
					err := tx.QueryRow(ctx, `INSERT INTO example_charges (amount) VALUES ($1) RETURNING id`, r.Amount).Scan(&r.ChargeID)
					return r, err
				}, exampleTable)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		return res
	}
	first := charge()
	retry := charge() // the same request again: replayed, not charged
	fmt.Println(first == retry, retry.Amount)
	// Output: true 1000
}

// DoTx begins the transaction itself, so BEGIN carries the claim and
// COMMIT the result: the idempotent charge costs the round trips of the
// same transaction without idem. A retry replays the first result.
func ExampleDoTx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	key := exampleKey("order-18") // the client's Idempotency-Key

	charge := func() chargeResult {
		res, err := idem.DoTx(ctx, pool, "customer-42", key, []byte("charge 500"),
			func(ctx context.Context, tx pgx.Tx) (chargeResult, error) {
				r := chargeResult{Amount: 500}
				err := tx.QueryRow(ctx, `INSERT INTO example_charges (amount) VALUES ($1) RETURNING id`, r.Amount).Scan(&r.ChargeID)
				return r, err
			}, exampleTable)
		if err != nil {
			log.Fatal(err)
		}
		return res
	}
	first := charge()
	retry := charge() // the same request again: replayed, not charged
	fmt.Println(first == retry, retry.Amount)
	// Output: true 500
}

// On database/sql, open the *sql.DB with txlock.OpenDB so that its
// connections send the claim with BEGIN and the result with COMMIT; fn
// gets the *sql.Tx. (On any other driver DoTx works the same, with the
// claim and the store as statements of their own.)
func ExampleDoTx_databaseSQL() {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	db := txlock.OpenDB(*cfg)
	defer db.Close()
	if err := idem.Migrate(ctx, db, exampleTable); err != nil {
		log.Fatal(err)
	}
	key := exampleKey("refund")
	refund := func(body string) (string, error) {
		return idem.DoTx(ctx, db, "", key, []byte(body), func(ctx context.Context, tx *sql.Tx) (string, error) {
			return "refunded: " + body, nil // the refund's writes, in tx
		}, exampleTable)
	}
	fmt.Println(refund("30 EUR"))
	fmt.Println(refund("30 EUR"))
	_, err = refund("300 EUR")
	fmt.Println(err)
	// Output:
	// refunded: 30 EUR <nil>
	// refunded: 30 EUR <nil>
	// idem: idempotency key reused with a different request
}

// With database/sql, pass the *sql.Tx; the same call, another reused
// key: ErrKeyReused, and fn does not run.
func ExampleDo_databaseSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := idem.Migrate(ctx, db, exampleTable); err != nil {
		log.Fatal(err)
	}
	key := exampleKey("transfer")
	transfer := func(body string) (string, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		defer tx.Rollback() // after a successful Commit, a no-op
		out, err := idem.Do(ctx, tx, "", key, []byte(body), func(ctx context.Context) (string, error) {
			return "done: " + body, nil // the transfer's writes, in tx
		}, exampleTable)
		if err != nil {
			return "", err
		}
		return out, tx.Commit()
	}
	fmt.Println(transfer("100 EUR to Bob"))
	fmt.Println(transfer("100 EUR to Bob"))
	_, err = transfer("900 EUR to Eve")
	fmt.Println(err)
	// Output:
	// done: 100 EUR to Bob <nil>
	// done: 100 EUR to Bob <nil>
	// idem: idempotency key reused with a different request
}

// sqlx's *sqlx.Tx embeds the *sql.Tx: pass tx.Tx.
func ExampleDo_sqlx() {
	ctx := context.Background()
	db, err := sqlx.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := idem.Migrate(ctx, db.DB, exampleTable); err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	n, err := idem.Do(ctx, tx.Tx, "", exampleKey("sqlx"), nil, func(ctx context.Context) (int, error) {
		var n int
		err := tx.GetContext(ctx, &n, `SELECT 41 + 1`)
		return n, err
	}, exampleTable)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, tx.Commit())
	// Output: 42 <nil>
}

// GORM's transaction holds a *sql.Tx in Statement.ConnPool.
func ExampleDo_gorm() {
	ctx := context.Background()
	gdb, err := gorm.Open(postgres.Open(os.Getenv("DATABASE_URL")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if sqlDB, err := gdb.DB(); err == nil {
		defer sqlDB.Close()
		if err := idem.Migrate(ctx, sqlDB, exampleTable); err != nil {
			log.Fatal(err)
		}
	}
	err = gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
		if !ok {
			return fmt.Errorf("not a *sql.Tx: %T", tx.Statement.ConnPool)
		}
		msg, err := idem.Do(ctx, sqlTx, "", exampleKey("gorm"), nil, func(ctx context.Context) (string, error) {
			return "written once", tx.Exec(`INSERT INTO example_charges (amount) VALUES (?)`, 5).Error
		}, exampleTable)
		fmt.Println(msg)
		return err
	})
	fmt.Println(err)
	// Output:
	// written once
	// <nil>
}

// Middleware runs the handler in a transaction of its own, recorded with
// the key; the handler's writes join it through TxFrom. A retry gets the
// first response back.
func ExampleMiddleware() {
	pool := examplePool()
	defer pool.Close()
	mw, err := idem.Middleware(pool, exampleTable,
		idem.WithScope(func(r *http.Request) string { return r.Header.Get("X-Customer") })) // the principal
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idem.TxFrom[pgx.Tx](r.Context())
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO example_charges (amount) VALUES (10) RETURNING id`).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, "charged 10 EUR")
	})))
	defer srv.Close()

	key := exampleKey("checkout")
	send := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
		req.Header.Set("X-Customer", "42")
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
		res, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		fmt.Printf("%d replayed=%q %s", res.StatusCode, res.Header.Get("Idempotent-Replayed"), strings.SplitN(string(b), "\n", 2)[0]+"\n")
	}
	send(`{"amount":10}`)
	send(`{"amount":10}`) // the client's retry
	send(`{"amount":99}`) // the same key for another request
	// Output:
	// 201 replayed="" charged 10 EUR
	// 201 replayed="true" charged 10 EUR
	// 422 replayed="" {"detail":"idempotency key reused with a different request","status":422,"title":"Unprocessable Entity"}
}

// TxFrom gives the handler the middleware's transaction, typed for the
// handle the middleware was given: *sql.Tx for a *sql.DB.
func ExampleTxFrom() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	mw, err := idem.Middleware(db, exampleTable, idem.WithScope(func(*http.Request) string { return "" })) // one client
	if err != nil {
		log.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := idem.TxFrom[*sql.Tx](r.Context())
		fmt.Println("in a transaction:", ok && tx != nil)
		// sqlx: &sqlx.Tx{Tx: tx, Mapper: dbx.Mapper}; GORM: gdb.Session(&gorm.Session{}).
		// Statement.ConnPool = tx. Never commit or roll it back here.
	}))
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", exampleKey("txfrom"))
	h.ServeHTTP(httptest.NewRecorder(), req)
	// Output: in a transaction: true
}

// DDL prints the statement for a migration tool.
func ExampleDDL() {
	ddl, err := idem.DDL()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.SplitN(ddl, "\n", 2)[0])
	// Output: CREATE TABLE IF NOT EXISTS "sqlock_idem" (
}

// Migrate creates the table at start-up; concurrent calls are safe.
func ExampleMigrate() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	fmt.Println(idem.Migrate(context.Background(), pool, exampleTable))
	// Output: <nil>
}

// Sweep deletes expired keys in short batches; run it periodically.
func ExampleSweep() {
	pool := examplePool()
	defer pool.Close()
	ctx := context.Background()
	// A key kept for a millisecond, expired by the time Sweep runs.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := idem.Do(ctx, tx, "", exampleKey("short-lived"), nil,
			func(context.Context) (bool, error) { return true, nil }, exampleTable, idem.WithRetention(time.Millisecond))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	n, err := idem.Sweep(ctx, pool, exampleTable, idem.WithBatch(500))
	fmt.Println(n >= 1, err)
	// Output: true <nil>
}

// RunPhases for work outside the database: each phase's completion is
// recorded under a lease on the key, and each phase gets a key to forward
// to the provider. A second run (a retry after a lost response, or after a
// crash, which resumes at the first phase not recorded) calls nothing
// that completed.
func ExampleRunPhases() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	if err := lease.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	leases := lease.New(pool)
	calls := 0
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++ // a real provider deduplicates on r.Header.Get("Idempotency-Key")
		fmt.Fprintf(w, "ch_%d", calls)
	}))
	defer provider.Close()
	charge := func(ctx context.Context, forward string, done [][]byte) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL+"/charges", nil)
		req.Header.Set("Idempotency-Key", forward)
		res, err := provider.Client().Do(req)
		if err != nil {
			return nil, err
		}
		defer res.Body.Close()
		return io.ReadAll(res.Body)
	}
	ship := func(ctx context.Context, _ string, done [][]byte) ([]byte, error) {
		return []byte("shipped after " + string(done[0])), nil
	}
	key := exampleKey("order-99")
	for range 2 {
		out, err := idem.RunPhases(ctx, pool, leases, "customer-42", key, []byte("order 99"),
			[]idem.Phase{{Name: "charge", Run: charge}, {Name: "ship", Run: ship}}, exampleTable)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s; provider called %d time(s)\n", out[1], calls)
	}
	// Output:
	// shipped after ch_1; provider called 1 time(s)
	// shipped after ch_1; provider called 1 time(s)
}

// The guide's layered defence as code: a transaction advisory lock on the
// order (replicas take turns), a state check (an order already paid is
// not charged), and the idempotency key in the same transaction (a
// client's retry replays the first answer). txlock retries the whole
// transaction on serialization failures and deadlocks; a retried Do
// replays.
func ExampleDo_layered() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_orders (id text PRIMARY KEY, status text NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	order, key := exampleKey("order"), exampleKey("retry-me")
	if _, err := pool.Exec(ctx, `INSERT INTO example_orders VALUES ($1, 'unpaid')`, order); err != nil {
		log.Fatal(err)
	}
	pay := func() string {
		var answer string
		err := txlock.DoPgx(ctx, pool, advisory.KeyOf("order:"+order), func(ctx context.Context, tx pgx.Tx) error {
			var err error
			answer, err = idem.Do(ctx, tx, "customer-42", key, []byte("pay "+order), func(ctx context.Context) (string, error) {
				t, err := tx.Exec(ctx, `UPDATE example_orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, order)
				if err != nil {
					return "", err
				}
				if t.RowsAffected() == 0 {
					return "already paid", nil
				}
				_, err = tx.Exec(ctx, `INSERT INTO example_charges (amount) VALUES (1000)`)
				return "charged", err
			}, exampleTable)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		return answer
	}
	fmt.Println(pay()) // the first request
	fmt.Println(pay()) // the client's retry: the first answer again
	// Output:
	// charged
	// charged
}
