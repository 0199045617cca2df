package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/pgtest"
)

// TestRoundTripsCountsOnePerStatementAndOnePerBatch: on a pgx connection
// dialled through RoundTrips, a statement is one round trip, three
// statements are three, and a batch of three (prepared already) is one.
func TestRoundTripsCountsOnePerStatementAndOnePerBatch(t *testing.T) {
	db := pgtest.New(t)
	var wire pgtest.RoundTrips
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = wire.Dial
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if wire.Count() == 0 {
		t.Fatal("the start-up exchange counted no round trip")
	}
	step := func(name string, want int64, f func() error) {
		t.Helper()
		n0 := wire.Count()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := wire.Count() - n0; got != want {
			t.Errorf("%s: %d round trips, want %d", name, got, want)
		}
	}
	step("one statement", 1, func() error { _, err := conn.Exec(ctx, "SELECT 1"); return err })
	step("three statements", 3, func() error {
		for range 3 {
			if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
				return err
			}
		}
		return nil
	})
	batch := func() error {
		b := &pgx.Batch{}
		for i := range 3 {
			b.Queue("SELECT $1::int", i)
		}
		return conn.SendBatch(ctx, b).Close()
	}
	step("a batch of three, first: prepare, then the batch", 2, batch)
	step("a batch of three", 1, batch)
}
