package sqlxhelpers_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/versioned"
)

type tombCart struct {
	ID        int64        `db:"id"`
	Items     string       `db:"items"`
	DeletedAt sql.NullTime `db:"deleted_at"`
	Version   int64        `db:"version" lock:"version"`
}

const tombCartsDDL = `CREATE TABLE carts (id bigint PRIMARY KEY, items text NOT NULL, deleted_at timestamptz,
	version bigint NOT NULL DEFAULT 1)`

// docs/versioned.md's limit and cure, through Helper: after a hard Delete
// and an INSERT of the same key a copy read before the delete writes the
// new row; with the row kept as a tombstone (Update of deleted_at) and
// revived with its version continuing, that copy is ErrStale.
func TestDeleteAndReinsertLimitAndTombstoneCure(t *testing.T) {
	ctx := context.Background()
	d := pgtest.New(t)
	d.Exec(tombCartsDDL)
	db := sqlx.NewDb(d.SQL(), "pgx")
	h := newHelper(t, db)

	// The limit: hard delete, re-insert at the default, the old copy writes.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	d.Exec(`INSERT INTO carts (id, items) VALUES (1, 'book')`)
	stale := tombCart{ID: 1, Items: "book", Version: 1}
	c := stale
	c.Items = "book,pen"
	must(h.Update(ctx, "carts", &c))
	must(h.Delete(ctx, "carts", &c))
	d.Exec(`INSERT INTO carts (id, items) VALUES (1, 'new')`)
	stale.Items = "zombie"
	if err := h.Update(ctx, "carts", &stale, sqlxhelpers.Columns("items")); err != nil {
		t.Fatalf("the limit has changed (update docs/versioned.md): %v", err)
	}

	// The cure: the delete keeps a tombstone, the revival continues the version.
	d.Exec(`INSERT INTO carts (id, items) VALUES (2, 'book')`)
	older := tombCart{ID: 2, Items: "book", Version: 1}
	c = older
	c.Items = "book,pen"
	must(h.Update(ctx, "carts", &c))
	atDelete := c
	c.DeletedAt = sql.NullTime{Time: time.Now(), Valid: true}
	must(h.Update(ctx, "carts", &c, sqlxhelpers.Columns("deleted_at")))
	var revived int64
	must(db.QueryRowContext(ctx, `INSERT INTO carts AS t (id, items) VALUES (2, 'new')
		ON CONFLICT (id) DO UPDATE SET items = excluded.items, deleted_at = NULL, version = t.version + 1
		WHERE t.deleted_at IS NOT NULL RETURNING version`).Scan(&revived))
	if revived != 4 {
		t.Fatalf("revived at version %d, want 4", revived)
	}
	for _, cp := range []tombCart{older, atDelete} {
		cp.Items = "zombie"
		if err := h.Update(ctx, "carts", &cp, sqlxhelpers.Columns("items")); !errors.Is(err, versioned.ErrStale) {
			t.Errorf("copy read at version %d before the delete: %v, want ErrStale", cp.Version, err)
		}
	}
	var items string
	must(db.GetContext(ctx, &items, `SELECT items FROM carts WHERE id = 2`))
	if items != "new" {
		t.Fatalf("items %q", items)
	}
}
