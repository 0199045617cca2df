package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestWireCountsRoundTrips: n simple-protocol statements on a connection
// dialled through a Wire are n turns and n ReadyForQuery messages; Reset
// starts over; a batch is one turn.
func TestWireCountsRoundTrips(t *testing.T) {
	db := New(t)
	ctx := context.Background()
	var w Wire
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = w.Dial
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if turns, ready := w.Counts(); turns == 0 || ready != 1 {
		t.Fatalf("start-up counted %d turns, %d ReadyForQuery", turns, ready)
	}
	w.Reset()
	for range 5 {
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	if turns, ready := w.Counts(); turns != 5 || ready != 5 {
		t.Fatalf("5 statements counted as %d turns, %d ReadyForQuery", turns, ready)
	}
	w.Reset()
	b := &pgx.Batch{}
	for range 3 {
		b.Queue("SELECT 1")
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if turns, _ := w.Counts(); turns != 1 || w.Turns() != 1 {
		t.Fatalf("a batch of 3 statements counted as %d turns, want 1", turns)
	}
}
