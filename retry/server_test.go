package retry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"

	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/retry"
)

func TestMain(m *testing.M) { pgtest.Main(m, mariatest.Close) }

// Each SQLSTATE the classification cares about, provoked on a real server,
// through both drivers.
func TestClassifiesRealServerErrors(t *testing.T) {
	db := pgtest.New(t)
	db.Exec("CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL); INSERT INTO t VALUES (1, 0), (2, 0)")
	for _, driver := range []string{"pgx", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			h, err := sql.Open(driver, db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			for _, tc := range []struct {
				name, code string
				provoke    func(*testing.T, *sql.DB) error
				retried    bool
			}{
				{"serialization failure", "40001", serializationFailure, true},
				{"deadlock", "40P01", deadlock, true},
				{"lock timeout", "55P03", lockTimeout, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					err := tc.provoke(t, h)
					if got := retry.SQLState(err); got != tc.code {
						t.Fatalf("SQLSTATE %q (%v), want %s", got, err, tc.code)
					}
					switch driver {
					case "pgx":
						var pgErr *pgconn.PgError
						if !errors.As(err, &pgErr) {
							t.Fatalf("want *pgconn.PgError, got %T", err)
						}
					case "postgres":
						var pqErr *pq.Error
						if !errors.As(err, &pqErr) {
							t.Fatalf("want *pq.Error, got %T", err)
						}
					}
					if ok, cause := retry.Default(err); ok != tc.retried || (ok && cause != tc.code) {
						t.Fatalf("Default = %v %q", ok, cause)
					}
					// Through Do: retried errors get a second attempt, the
					// rest are returned unchanged after one.
					calls := 0
					got := retry.Do(context.Background(), func(context.Context) error {
						calls++
						if calls == 1 {
							return err
						}
						return nil
					}, retry.WithBackoff(retry.Constant(0)))
					if tc.retried && (got != nil || calls != 2) {
						t.Fatalf("Do: %v after %d calls", got, calls)
					}
					if !tc.retried && (got != err || calls != 1) {
						t.Fatalf("Do: %v after %d calls", got, calls)
					}
					if tc.code == retry.CodeLockNotAvailable {
						calls = 0
						got = retry.Do(context.Background(), func(context.Context) error {
							calls++
							if calls == 1 {
								return err
							}
							return nil
						}, retry.RetryLockTimeout(), retry.WithBackoff(retry.Constant(0)))
						if got != nil || calls != 2 {
							t.Fatalf("RetryLockTimeout: %v after %d calls", got, calls)
						}
					}
				})
			}
		})
	}
}

func serializationFailure(t *testing.T, db *sql.DB) error {
	ctx := context.Background()
	opts := &sql.TxOptions{Isolation: sql.LevelSerializable}
	t1, err := db.BeginTx(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback()
	t2, err := db.BeginTx(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer t2.Rollback()
	var n int
	for _, tx := range []*sql.Tx{t1, t2} {
		if err := tx.QueryRowContext(ctx, "SELECT n FROM t WHERE id = 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := t1.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	_, err = t2.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = 1")
	return err
}

func deadlock(t *testing.T, db *sql.DB) error {
	ctx := context.Background()
	begin := func() *sql.Tx {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SET LOCAL deadlock_timeout = '50ms'"); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	t1, t2 := begin(), begin()
	defer t1.Rollback()
	defer t2.Rollback()
	if _, err := t1.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := t2.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { _, err := t1.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = 2"); errs <- err }()
	time.Sleep(20 * time.Millisecond) // let t1 queue behind t2 first (either order deadlocks)
	go func() { _, err := t2.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = 1"); errs <- err }()
	// One of the two is chosen as the victim; the other then proceeds.
	first := <-errs
	if first == nil {
		return <-errs
	}
	<-errs
	return first
}

func lockTimeout(t *testing.T, db *sql.DB) error {
	ctx := context.Background()
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	waiter, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Rollback()
	if _, err := waiter.ExecContext(ctx, "SET LOCAL lock_timeout = '50ms'"); err != nil {
		t.Fatal(err)
	}
	_, err = waiter.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = 1")
	return err
}
