package versioned_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	_ "github.com/glebarez/go-sqlite" // pure-Go SQLite, driver "sqlite"
	"github.com/sqlock/sqlock/versioned"
)

// The SQLite dialect against a real SQLite: ? placeholders, "quoted"
// identifiers, the two-step compare-and-swap, and the stale probe.
func TestSQLiteDialect(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "v.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE "it""ems" (id INTEGER PRIMARY KEY, "na me" TEXT NOT NULL, status TEXT, owner INTEGER,
		version INTEGER NOT NULL DEFAULT 0);
		INSERT INTO "it""ems" (id, "na me", status) VALUES (1, 'a', 'open'), (2, 'b', 'open')`); err != nil {
		t.Fatal(err)
	}
	items := versioned.MustTable(`it"ems`, versioned.WithDialect(versioned.SQLite), versioned.WithProbe())

	v, err := versioned.Update(ctx, db, items, 1, uint8(0), versioned.Set("na me", "a'; DROP TABLE x; --"))
	if err != nil || v != 1 {
		t.Fatalf("Update = %d, %v", v, err)
	}
	_, err = versioned.Update(ctx, db, items, 1, uint8(0), versioned.Set("na me", "z"))
	var se *versioned.StaleError
	if !errors.As(err, &se) || !rowChanged(se) || se.Current != 1 {
		t.Fatalf("stale Update: %v", err)
	}
	if err := versioned.Delete(ctx, db, items, 2, 5); !errors.As(err, &se) || se.Current != 0 {
		t.Fatalf("stale Delete: %v", err)
	}
	if err := versioned.Delete(ctx, db, items, 2, 0); err != nil {
		t.Fatal(err)
	}
	if err := versioned.Delete(ctx, db, items, 2, 0); !errors.As(err, &se) || !se.Gone {
		t.Fatalf("Delete of a deleted row: %v", err)
	}
	var name string
	var ver int
	if err := db.QueryRow(`SELECT "na me", version FROM "it""ems" WHERE id = 1`).Scan(&name, &ver); err != nil ||
		name != "a'; DROP TABLE x; --" || ver != 1 {
		t.Fatalf("row 1: %q %d %v", name, ver, err)
	}

	// Compare-and-swap: Missing, then a race of 16 claimers with one winner.
	claim := func(id int, w int) (versioned.CASResult, error) {
		return versioned.CompareAndSwap(ctx, db, items, id,
			[]versioned.Pair{versioned.Eq("status", "open"), versioned.Eq("owner", nil)},
			versioned.Set("status", "taken"), versioned.Set("owner", w))
	}
	if r, err := claim(2, 1); err != nil || r != versioned.Missing {
		t.Fatalf("claim of a deleted row: %v %v", r, err)
	}
	var won, lost atomic.Int64
	var wg sync.WaitGroup
	for w := 1; w <= 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := claim(1, w)
			switch {
			case err != nil:
				t.Error(err)
			case r == versioned.Won:
				won.Add(1)
			case r == versioned.Lost:
				lost.Add(1)
			default:
				t.Errorf("claim: %v", r)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 || lost.Load() != 15 {
		t.Fatalf("won %d lost %d", won.Load(), lost.Load())
	}
}
