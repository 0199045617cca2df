package idem_test

import (
	"context"
	"testing"

	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// TestReplayIsOneRoundTrip: on pgx (statements cached after a warm-up), a
// first execution costs two round trips of its own (claim, store the
// result), a replay one (the claim finds the committed result) — whatever
// fn does in between is fn's.
func TestReplayIsOneRoundTrip(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	w := &pgtest.Wire{}
	pool := openPool(t, db.DSN, w)
	pool.Config().MaxConns = 1
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	do := func(key string) int {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.Reset()
		if _, err := idem.Do(ctx, tx, "", key, []byte("fp"), func(context.Context) (int, error) { return 7, nil }); err != nil {
			t.Fatal(err)
		}
		n := turns(w)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return n
	}
	do("warm-up")
	do("warm-up") // both statements now prepared on this connection
	if n := do("k"); n != 2 {
		t.Fatalf("first execution: %d round trips, want 2", n)
	}
	if n := do("k"); n != 1 {
		t.Fatalf("replay: %d round trips, want 1", n)
	}
}
