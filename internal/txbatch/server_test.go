package txbatch

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// What a statement ahead of BEGIN writes belongs to the transaction
// BeginBatch returns: invisible to others until COMMIT, gone with a
// ROLLBACK; and a statement ahead that calls StopBegin once it has
// returned its rows ends the batch in one round trip with those rows in
// hand, nothing written, the connection idle and not left read only.
func TestStatementsAheadOfBegin(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	other, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (k text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	visible := func(k string) bool {
		t.Helper()
		var n int
		if err := other.QueryRow(ctx, "SELECT count(*) FROM t WHERE k = $1", k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	// insert queues, ahead of BEGIN, an INSERT of k whose one row says
	// whether it stopped BEGIN (stop: always).
	insert := func(k string, stop bool, stopped *bool) func(*pgx.Batch) {
		return func(b *pgx.Batch) {
			Ahead(b, func(b *pgx.Batch) {
				b.Queue(`WITH ins AS (INSERT INTO t VALUES ($1) RETURNING k)
SELECT CASE WHEN $2::bool THEN `+StopBegin+` IS NOT NULL ELSE false END FROM ins`, k, stop).
					QueryRow(func(r pgx.Row) error { return r.Scan(stopped) })
			})
		}
	}

	for _, commit := range []bool{true, false} {
		k := map[bool]string{true: "committed", false: "rolled back"}[commit]
		var stopped bool
		tx, err := BeginBatch(ctx, conn, pgx.TxOptions{}, insert(k, false, &stopped))
		if err != nil {
			t.Fatal(err)
		}
		if conn.PgConn().TxStatus() != 'T' || visible(k) {
			t.Fatalf("%s: status %c, visible before the end: %v", k, conn.PgConn().TxStatus(), visible(k))
		}
		end := tx.Rollback
		if commit {
			end = tx.Commit
		}
		if err := end(ctx); err != nil {
			t.Fatal(err)
		}
		if visible(k) != commit {
			t.Errorf("%s: visible after the end: %v", k, visible(k))
		}
	}

	stopped := false
	_, err = BeginBatch(ctx, conn, pgx.TxOptions{}, func(b *pgx.Batch) {
		insert("stopped", true, &stopped)(b)
		b.Queue("INSERT INTO t VALUES ('after BEGIN')")
	})
	if !Stopped(err) || !stopped {
		t.Fatalf("stopped BEGIN: %v (row read: %v), want Stopped with the row", err, stopped)
	}
	if conn.PgConn().TxStatus() != 'I' || visible("stopped") || visible("after BEGIN") {
		t.Fatalf("after the stop: status %c, something written", conn.PgConn().TxStatus())
	}
	var ro string
	if err := conn.QueryRow(ctx, "SHOW transaction_read_only").Scan(&ro); err != nil || ro != "off" {
		t.Fatalf("after the stop: transaction_read_only %q %v", ro, err)
	}
}
