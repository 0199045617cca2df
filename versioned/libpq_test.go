package versioned_test

import (
	"database/sql"
	"errors"
	"testing"

	_ "github.com/lib/pq" // driver "postgres"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/versioned"
)

// The same calls through lib/pq: its argument conversion, RowsAffected and
// scanning of the compare-and-swap row work as with pgx.
func TestLibPQ(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL,
		version smallint NOT NULL DEFAULT 0);
		INSERT INTO accounts (id, owner, balance) VALUES (1, 'ann', 100), (2, 'bob', 5)`)
	db, err := sql.Open("postgres", pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := ctxT(t)
	accounts := versioned.MustTable("accounts", versioned.WithProbe())
	v, err := versioned.Update(ctx, db, accounts, int64(1), int16(0), versioned.Set("balance", 90))
	if err != nil || v != 1 {
		t.Fatalf("Update = %d, %v", v, err)
	}
	_, err = versioned.Update(ctx, db, accounts, int64(1), int16(0), versioned.Set("balance", 80))
	var se *versioned.StaleError
	if !errors.As(err, &se) || !rowChanged(se) || se.Current != 1 {
		t.Fatalf("stale Update: %v", err)
	}
	if err := versioned.Delete(ctx, db, accounts, int64(2), int16(0)); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]versioned.CASResult{1: versioned.Won, 2: versioned.Missing} {
		r, err := versioned.CompareAndSwap(ctx, db, accounts, id,
			[]versioned.Pair{versioned.Eq("owner", "ann")}, versioned.Set("owner", "carl"))
		if err != nil || r != want {
			t.Fatalf("CAS %d = %v, %v; want %v", id, r, err, want)
		}
	}
	if r, err := versioned.CompareAndSwap(ctx, db, accounts, int64(1),
		[]versioned.Pair{versioned.Eq("owner", "ann")}, versioned.Set("owner", "dan")); err != nil || r != versioned.Lost {
		t.Fatalf("second CAS = %v, %v", r, err)
	}
}
