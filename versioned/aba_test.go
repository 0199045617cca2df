package versioned_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/versioned"
)

// The limit, shown exactly as docs/versioned.md states it: a hard DELETE
// forgets the row's version, so the row re-inserted with the same key
// starts again at the column's default, and a copy read before the delete
// at that version writes the new row — no ErrStale. (The ABA of version
// columns: the version went 1 → 2 → gone → 1.)
func TestDeleteAndReinsertLetsACopyReadBeforeTheDeleteWrite(t *testing.T) {
	ctx := ctxT(t)
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE carts (id bigint PRIMARY KEY, items text NOT NULL, version bigint NOT NULL DEFAULT 1);
		INSERT INTO carts (id, items) VALUES (1, 'book')`)
	db := pg.SQL()
	carts := versioned.MustTable("carts")

	stale := cart{ID: 1, Items: "book", Version: 1} // read by a slow client
	fresh := stale
	if err := versioned.UpdateStruct(ctx, db, carts, &fresh, versioned.Set("items", "book,pen")); err != nil {
		t.Fatal(err)
	}
	if err := versioned.DeleteStruct(ctx, db, carts, &fresh); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO carts (id, items) VALUES (1, 'new customer''s cart')`); err != nil {
		t.Fatal(err)
	}
	err := versioned.UpdateStruct(ctx, db, carts, &stale, versioned.Set("items", "book,lamp"))
	if err != nil {
		t.Fatalf("the limit has changed (update docs/versioned.md): the copy read before the delete got %v", err)
	}
	if got := snapshot(t, db, "carts"); got != `(1,"book,lamp",2)` {
		t.Fatalf("rows: %s, want the new customer's cart overwritten by the copy read before the delete", got)
	}
}

type cart struct {
	ID        int64
	Items     string
	DeletedAt sql.NullTime
	Version   int64 `lock:"version"`
}

// The cure docs/versioned.md recommends: keep a deleted row as a tombstone.
// The delete is a versioned UPDATE that sets deleted_at (the version moves
// on), reads skip tombstones, and re-creating the key revives the
// tombstone with the version continuing (tombstoneReviveSQL), so no key
// ever sees a version twice: every copy read before the delete is
// ErrStale, whether it was read at the version the delete saw or at an
// older one, and the revived row is written only by copies read after it.
func TestTombstonesMakeACopyReadBeforeTheDeleteStale(t *testing.T) {
	ctx := ctxT(t)
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE carts (id bigint PRIMARY KEY, items text NOT NULL, deleted_at timestamptz,
		version bigint NOT NULL DEFAULT 1);
		INSERT INTO carts (id, items) VALUES (1, 'book')`)
	db := pg.SQL()
	carts := versioned.MustTable("carts")

	older := cart{ID: 1, Items: "book", Version: 1}
	c := older
	if err := versioned.UpdateStruct(ctx, db, carts, &c, versioned.Set("items", "book,pen")); err != nil {
		t.Fatal(err)
	}
	atDelete := c // the version the delete saw
	if err := versioned.UpdateStruct(ctx, db, carts, &c, versioned.Set("deleted_at", sql.NullTime{Time: time.Now(), Valid: true})); err != nil {
		t.Fatal(err)
	}
	if got := liveCarts(t, db); got != 0 {
		t.Fatalf("%d live carts after the delete", got)
	}
	revived, err := reviveCart(ctx, db, 1, "new customer's cart")
	if err != nil || revived != 4 {
		t.Fatalf("revive: version %d, %v; want the version to continue at 4", revived, err)
	}
	for _, cp := range []cart{older, atDelete} {
		before := cp
		err := versioned.UpdateStruct(ctx, db, carts, &cp, versioned.Set("items", "book,lamp"))
		if !errors.Is(err, versioned.ErrStale) || cp != before {
			t.Errorf("copy read at version %d before the delete: %v, want ErrStale and the struct unchanged", before.Version, err)
		}
	}
	if got := snapshot(t, db, "carts"); got != `(1,"new customer's cart",,4)` {
		t.Fatalf("rows: %s", got)
	}
	// A copy read after the revival writes.
	now := cart{ID: 1, Items: "new customer's cart", Version: revived}
	if err := versioned.UpdateStruct(ctx, db, carts, &now, versioned.Set("items", "lamp")); err != nil || now.Version != 5 {
		t.Fatalf("a copy of the revived row: %v %+v", err, now)
	}
	// Reviving a live row changes nothing: it is not a tombstone.
	if v, err := reviveCart(ctx, db, 1, "someone else's"); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("reviving a live cart: version %d, %v; want no row", v, err)
	}
	// A key never used is inserted at the default.
	if v, err := reviveCart(ctx, db, 2, "fresh"); err != nil || v != 1 {
		t.Fatalf("a new key: version %d, %v", v, err)
	}
}

// tombstoneReviveSQL creates a cart or revives its tombstone, the version
// continuing from the tombstone's: docs/versioned.md's statement. A live
// row with the key is left alone (no row is returned).
const tombstoneReviveSQL = `INSERT INTO carts AS t (id, items) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET items = excluded.items, deleted_at = NULL, version = t.version + 1
WHERE t.deleted_at IS NOT NULL
RETURNING version`

func reviveCart(ctx context.Context, db *sql.DB, id int64, items string) (version int64, err error) {
	err = db.QueryRowContext(ctx, tombstoneReviveSQL, id, items).Scan(&version)
	return version, err
}

func liveCarts(t *testing.T, db *sql.DB) (n int) {
	t.Helper()
	if err := db.QueryRow(`SELECT count(*) FROM carts WHERE deleted_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
