package retry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/retry"
)

// mysqlDeadlock provokes a real deadlock on MariaDB: two transactions
// update rows 1 and 2 in opposite orders. InnoDB rolls one back with error
// 1213, whichever order the statements reach it in; that error is returned.
func mysqlDeadlock(t *testing.T, db *sql.DB) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cross := func(first, second int, errs chan<- error, ready chan<- struct{}, go2 <-chan struct{}) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			errs <- err
			return
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = ?", first); err != nil {
			errs <- err
			return
		}
		ready <- struct{}{}
		<-go2
		_, err = tx.ExecContext(ctx, "UPDATE t SET n = n + 1 WHERE id = ?", second)
		errs <- err
	}
	errs, ready, go2 := make(chan error, 2), make(chan struct{}, 2), make(chan struct{})
	go cross(1, 2, errs, ready, go2)
	go cross(2, 1, errs, ready, go2)
	<-ready
	<-ready // both hold their first row
	close(go2)
	var victim error
	for range 2 {
		if err := <-errs; err != nil {
			if victim != nil {
				t.Fatalf("two errors: %v; %v", victim, err)
			}
			victim = err
		}
	}
	if victim == nil {
		t.Fatal("no deadlock")
	}
	return victim
}

// TestRetriesMySQLDeadlock: a real MariaDB deadlock (error 1213, SQLSTATE
// 40001, from go-sql-driver/mysql, whose error has no SQLState method) is
// classified as retryable, and Do runs the function again.
func TestRetriesMySQLDeadlock(t *testing.T) {
	my := mariatest.New(t)
	my.Exec("CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL)")
	my.Exec("INSERT INTO t VALUES (1, 0), (2, 0)")
	err := mysqlDeadlock(t, my.SQL())
	if got := retry.SQLState(err); got != "40001" {
		t.Fatalf("SQLState(%v) = %q, want 40001", err, got)
	}
	if ok, cause := retry.Default(err); !ok || cause != "40001" {
		t.Fatalf("Default(%v) = %v, %q", err, ok, cause)
	}
	calls := 0
	got := retry.Do(context.Background(), func(context.Context) error {
		calls++
		if calls == 1 {
			return err
		}
		return nil
	}, retry.WithBackoff(retry.Constant(time.Millisecond)))
	if got != nil || calls != 2 {
		t.Fatalf("Do = %v after %d calls, want nil after 2", got, calls)
	}
}

// TestMySQLLockWaitTimeoutOnlyWhenAsked: MySQL's lock wait timeout (error
// 1205) is not retried by default, and is with RetryLockTimeout.
func TestMySQLLockWaitTimeoutOnlyWhenAsked(t *testing.T) {
	my := mariatest.New(t)
	my.Exec("CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL)")
	my.Exec("INSERT INTO t VALUES (1, 0)")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := my.SQL()
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "UPDATE t SET n = 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	_, waitErr := conn.ExecContext(ctx, "UPDATE t SET n = 2 WHERE id = 1")
	if waitErr == nil {
		t.Fatal("the update did not wait for the lock")
	}
	if ok, cause := retry.Default(waitErr); ok {
		t.Fatalf("Default retries %v (cause %q)", waitErr, cause)
	}
	calls := 0
	got := retry.Do(ctx, func(context.Context) error {
		calls++
		if calls == 1 {
			return waitErr
		}
		return nil
	}, retry.RetryLockTimeout(), retry.WithBackoff(retry.Constant(time.Millisecond)))
	if got != nil || calls != 2 {
		t.Fatalf("Do with RetryLockTimeout = %v after %d calls (first error %v)", got, calls, waitErr)
	}
	calls = 0
	if got := retry.Do(ctx, func(context.Context) error { calls++; return waitErr }); !errors.Is(got, waitErr) || calls != 1 {
		t.Fatalf("Do without it = %v after %d calls", got, calls)
	}
}
