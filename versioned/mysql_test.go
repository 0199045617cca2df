package versioned_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

// The tests in this file run on a real MariaDB (internal/testing/mariatest), with
// go-sql-driver/mysql's default DSN unless they say otherwise.

const myItemsSchema = `CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, status VARCHAR(20) NULL, version BIGINT NOT NULL DEFAULT 1, fence BIGINT NULL) ENGINE=InnoDB`

func myTable(opts ...versioned.Option) *versioned.Table {
	return versioned.MustTable("items", append([]versioned.Option{versioned.WithDialect(versioned.MySQL)}, opts...)...)
}

// snapshotTx begins a REPEATABLE READ transaction (MySQL's default) and
// reads row 1 in it, so the transaction's snapshot is fixed before another
// session changes the row.
func snapshotTx(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	var v int64
	if err := tx.QueryRow("SELECT version FROM items WHERE id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestMySQLProbeReadsTheNewestRowInRepeatableRead: after a stale write in
// a transaction that read the row before another session changed or
// deleted it, WithProbe reports the row as it is now (the newest committed
// version, as the UPDATE saw it), not the transaction's old snapshot.
func TestMySQLProbeReadsTheNewestRowInRepeatableRead(t *testing.T) {
	my := mariatest.New(t)
	my.Exec(myItemsSchema)
	db := my.SQL()
	ctx := ctxT(t)
	items := myTable(versioned.WithProbe())

	t.Run("changed", func(t *testing.T) {
		my.Exec("DELETE FROM items")
		my.Exec("INSERT INTO items (id, name) VALUES (1, 'a')")
		tx := snapshotTx(t, db)
		my.Exec("UPDATE items SET version = 5 WHERE id = 1")
		_, err := versioned.Update(ctx, tx, items, 1, int64(1), versioned.Set("name", "b"))
		var se *versioned.StaleError
		if !errors.As(err, &se) {
			t.Fatalf("err = %v, want *StaleError", err)
		}
		if !se.Probed || se.Gone || se.Current != 5 {
			t.Fatalf("probe: %+v, want the row at version 5", se)
		}
	})
	t.Run("fenced-deleted", func(t *testing.T) {
		my.Exec("DELETE FROM items")
		my.Exec("INSERT INTO items (id, name, status) VALUES (1, 'a', NULL)")
		tx := snapshotTx(t, db)
		my.Exec("DELETE FROM items WHERE id = 1")
		_, err := versioned.Update(ctx, tx, myTable(), 1, int64(1), versioned.Set("name", "b"), versioned.Fence("fence", 7))
		var se *versioned.StaleError
		if !errors.As(err, &se) || !se.Probed || !se.Gone {
			t.Fatalf("fenced write of a deleted row: %#v, want stale, gone", err)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		my.Exec("DELETE FROM items")
		my.Exec("INSERT INTO items (id, name) VALUES (1, 'a')")
		tx := snapshotTx(t, db)
		my.Exec("DELETE FROM items WHERE id = 1")
		_, err := versioned.Update(ctx, tx, items, 1, int64(1), versioned.Set("name", "b"))
		var se *versioned.StaleError
		if !errors.As(err, &se) {
			t.Fatalf("err = %v, want *StaleError", err)
		}
		if !se.Probed || !se.Gone {
			t.Fatalf("probe: %+v, want the row gone", se)
		}
	})
}

// TestMySQLCompareAndSwapMissingInRepeatableRead: a compare-and-swap in a
// transaction that read the row before another session deleted it returns
// Missing, and Lost for a row another session changed.
func TestMySQLCompareAndSwapMissingInRepeatableRead(t *testing.T) {
	my := mariatest.New(t)
	my.Exec(myItemsSchema)
	db := my.SQL()
	ctx := ctxT(t)
	items := myTable()
	for _, c := range []struct {
		other string
		want  versioned.CASResult
	}{
		{"DELETE FROM items WHERE id = 1", versioned.Missing},
		{"UPDATE items SET status = 'taken' WHERE id = 1", versioned.Lost},
	} {
		my.Exec("DELETE FROM items")
		my.Exec("INSERT INTO items (id, name) VALUES (1, 'a')")
		tx := snapshotTx(t, db)
		my.Exec(c.other)
		got, err := versioned.CompareAndSwap(ctx, tx, items, 1,
			[]versioned.Pair{versioned.Eq("status", nil)}, versioned.Set("status", "mine"))
		if err != nil || got != c.want {
			t.Fatalf("after %q: %v, %v; want %v", c.other, got, err, c.want)
		}
		tx.Rollback()
	}
}

// TestMySQLCompareAndSwapToTheSameValueWins: on a default DSN (MySQL counts
// a matched row whose values do not change as unaffected) and with
// clientFoundRows=true alike, a swap that sets the values the row already
// has wins, and one whose expectation does not hold loses: never a false
// Lost, never a false Won.
func TestMySQLCompareAndSwapToTheSameValueWins(t *testing.T) {
	my := mariatest.New(t)
	my.Exec(myItemsSchema)
	ctx := ctxT(t)
	items := myTable()
	for _, dsn := range []string{my.DSN, my.DSNWith("clientFoundRows=true")} {
		db := my.Open(dsn)
		my.Exec("DELETE FROM items")
		my.Exec("INSERT INTO items (id, name, status) VALUES (1, 'a', 'done'), (2, 'b', NULL)")
		for _, c := range []struct {
			key    int
			expect []versioned.Pair
			set    []versioned.Pair
			want   versioned.CASResult
		}{
			{1, []versioned.Pair{versioned.Eq("status", "done")}, []versioned.Pair{versioned.Set("status", "done")}, versioned.Won},
			{1, []versioned.Pair{versioned.Eq("name", "a")}, []versioned.Pair{versioned.Set("status", "done"), versioned.Set("name", "a")}, versioned.Won},
			{2, []versioned.Pair{versioned.Eq("status", nil)}, []versioned.Pair{versioned.Set("status", nil)}, versioned.Won},
			{1, []versioned.Pair{versioned.Eq("status", "open")}, []versioned.Pair{versioned.Set("status", "done")}, versioned.Lost},
			{1, []versioned.Pair{versioned.Eq("status", nil)}, []versioned.Pair{versioned.Set("status", "done")}, versioned.Lost},
			{2, []versioned.Pair{versioned.Eq("status", "done")}, []versioned.Pair{versioned.Set("status", nil)}, versioned.Lost},
			{3, []versioned.Pair{versioned.Eq("status", "done")}, []versioned.Pair{versioned.Set("status", "done")}, versioned.Missing},
		} {
			got, err := versioned.CompareAndSwap(ctx, db, items, c.key, c.expect, c.set...)
			if err != nil || got != c.want {
				t.Fatalf("%s: key %d expect %v set %v: %v, %v; want %v", dsn, c.key, c.expect, c.set, got, err, c.want)
			}
		}
		var name string
		var status sql.NullString
		if err := db.QueryRow("SELECT name, status FROM items WHERE id = 1").Scan(&name, &status); err != nil {
			t.Fatal(err)
		}
		if name != "a" || status.String != "done" {
			t.Fatalf("row 1 = %s, %v", name, status)
		}
	}
}

// TestMySQLStructWrites: versioned's struct and column writes on MariaDB:
// an update bumps the version, a stale one changes nothing and is
// *StaleError, a delete by version removes the row.
func TestMySQLStructWrites(t *testing.T) {
	my := mariatest.New(t)
	my.Exec(myItemsSchema)
	my.Exec("INSERT INTO items (id, name) VALUES (1, 'a'), (2, 'b')")
	db := my.SQL()
	ctx := ctxT(t)
	items := myTable()
	type item struct {
		ID      int    `db:"id"`
		Name    string `db:"name"`
		Version int64  `lock:"version"`
	}
	it := item{ID: 1, Name: "a", Version: 1}
	if err := versioned.UpdateStruct(ctx, db, items, &it, versioned.Set("name", "a")); err != nil {
		t.Fatalf("an update that changes only the version: %v", err)
	}
	if it.Version != 2 {
		t.Fatalf("version %d after update, want 2", it.Version)
	}
	stale := item{ID: 1, Name: "x", Version: 1}
	if err := versioned.UpdateStruct(ctx, db, items, &stale, versioned.Set("name", "x")); !errors.Is(err, versioned.ErrStale) {
		t.Fatalf("stale update: %v", err)
	}
	if v, err := versioned.Update(ctx, db, items, 2, int64(1)); err != nil || v != 2 {
		t.Fatalf("touch: %d, %v", v, err)
	}
	if err := versioned.DeleteStruct(ctx, db, items, &item{ID: 2, Version: 1}); !errors.Is(err, versioned.ErrStale) {
		t.Fatalf("stale delete: %v", err)
	}
	if err := versioned.DeleteStruct(ctx, db, items, &item{ID: 2, Version: 2}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	var rows string
	if err := db.QueryRow("SELECT GROUP_CONCAT(CONCAT(id, ':', name, ':', version) ORDER BY id) FROM items").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != "1:a:2" {
		t.Fatalf("rows %s, want 1:a:2", rows)
	}
}

// TestMySQLNoLostUpdate: 32 goroutines × 300 read–modify–write increments
// of one row through versioned.Update and retry on MariaDB lose nothing.
func TestMySQLNoLostUpdate(t *testing.T) {
	workers, each := 32, mariatest.Increments()
	my := mariatest.New(t)
	my.Exec(`CREATE TABLE counters (id INT PRIMARY KEY, n BIGINT NOT NULL, version BIGINT NOT NULL DEFAULT 0)`)
	my.Exec(`INSERT INTO counters (id, n) VALUES (1, 0)`)
	db := my.SQL()
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	ctx := ctxT(t)
	counters := versioned.MustTable("counters", versioned.WithDialect(versioned.MySQL))
	var attempts atomic.Int64
	// A wider backoff than the PostgreSQL test's: InnoDB makes a loser
	// wait for the winner's row lock, so quick retries only collide again.
	policy := retry.New(retry.WithMaxAttempts(1_000_000),
		retry.WithBackoff(retry.Exponential(2*time.Millisecond, 250*time.Millisecond)))
	began := time.Now()
	runWorkers(t, workers, func() error {
		for range each {
			err := policy.Do(ctx, func(ctx context.Context) error {
				attempts.Add(1)
				var n, v int64
				if err := db.QueryRowContext(ctx, `SELECT n, version FROM counters WHERE id = 1`).Scan(&n, &v); err != nil {
					return err
				}
				_, err := versioned.Update(ctx, db, counters, 1, v, versioned.Set("n", n+1))
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	var n, v int64
	if err := db.QueryRow(`SELECT n, version FROM counters WHERE id = 1`).Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if want := int64(workers * each); n != want || v != want {
		t.Fatalf("counter = %d at version %d, want %d", n, v, want)
	}
	t.Logf("%d×%d increments = %d in %v: %d attempts", workers, each, n, time.Since(began).Round(time.Millisecond), attempts.Load())
}

// runWorkers runs f in n goroutines started together and fails the test
// with the first error.
func runWorkers(t *testing.T, n int, f func() error) {
	t.Helper()
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- f()
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
