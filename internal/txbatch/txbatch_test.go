package txbatch

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Ahead puts its statements before BEGIN, in the order queued, and leaves
// the rest of the batch as it was.
func TestAheadQueuesBeforeBegin(t *testing.T) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue("SELECT 'after'")
	Ahead(b, func(b *pgx.Batch) {
		b.Queue("SELECT 'first'")
		b.Queue("SELECT 'second'")
	})
	b.Queue("SELECT 'last'")
	var got []string
	for _, q := range b.QueuedQueries {
		got = append(got, q.SQL)
	}
	want := []string{"SELECT 'first'", "SELECT 'second'", "begin", "SELECT 'after'", "SELECT 'last'"}
	if !slices.Equal(got, want) {
		t.Fatalf("batch %q, want %q", got, want)
	}
}

// A statement ahead of a BEGIN that sets an isolation level or DEFERRABLE
// would take the snapshot PostgreSQL needs unset to apply them, and one
// that sets an access mode would lose StopBegin: BeginBatch refuses them
// before anything is sent (the connection is not even looked at: it is
// nil here).
func TestBeginBatchRefusesStatementsAheadOfModes(t *testing.T) {
	ahead := func(b *pgx.Batch) { Ahead(b, func(b *pgx.Batch) { b.Queue("SELECT 1") }) }
	for _, o := range []pgx.TxOptions{
		{IsoLevel: pgx.RepeatableRead}, {IsoLevel: pgx.Serializable, DeferrableMode: pgx.Deferrable},
		{AccessMode: pgx.ReadOnly}, {AccessMode: pgx.ReadWrite}, {BeginQuery: "BEGIN"},
	} {
		if _, err := BeginBatch(context.Background(), nil, o, ahead); !errors.Is(err, errAheadOfModes) {
			t.Errorf("%+v: %v, want errAheadOfModes", o, err)
		}
	}
}

// sqlIsolation names database/sql's levels as pgx's stdlib driver does,
// and refuses those PostgreSQL has no name for.
func TestSQLIsolation(t *testing.T) {
	for level, want := range map[sql.IsolationLevel]string{
		sql.LevelDefault: "", sql.LevelReadCommitted: "READ COMMITTED", sql.LevelSnapshot: "REPEATABLE READ",
		sql.LevelSerializable: "SERIALIZABLE", sql.LevelReadUncommitted: "READ UNCOMMITTED",
	} {
		if got, ok := sqlIsolation(driver.IsolationLevel(level)); !ok || got != want {
			t.Errorf("%v: %q %v", level, got, ok)
		}
	}
	if _, ok := sqlIsolation(driver.IsolationLevel(sql.LevelLinearizable)); ok {
		t.Error("linearizable accepted")
	}
}
