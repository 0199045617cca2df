package versioned_test

import (
	"database/sql"
	"errors"
	"reflect"
	"testing"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/versioned"
)

type orderStatus string

// followOrder has a field for every column: a named string, a narrow
// integer, a nullable note through sql.NullString, a pointer, and one
// embedded struct whose field is promoted.
type followOrder struct {
	ID      int64
	Status  orderStatus
	Qty     int8
	Note    sql.NullString
	Coupon  *string
	Version int64 `lock:"version"`
	followAudit
	Scratch string `db:"-"` // no column
}

type followAudit struct {
	ChangedBy string `db:"changed_by"`
}

func followDB(t *testing.T) *sql.DB {
	t.Helper()
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE follow_orders (id bigint PRIMARY KEY, status text NOT NULL, qty smallint NOT NULL,
		note text, coupon text, changed_by text NOT NULL DEFAULT '', scratch text, version bigint NOT NULL);
		INSERT INTO follow_orders (id, status, qty, version) VALUES (1, 'new', 1, 1)`)
	return pg.SQL()
}

// After UpdateStruct the struct follows the row: every assigned value is
// in the field of its column, as the database now has it, beside the new
// version. A stale write leaves every field as it was.
func TestUpdateStructAppliesTheAssignmentsToTheStruct(t *testing.T) {
	ctx := ctxT(t)
	db := followDB(t)
	tbl := versioned.MustTable("follow_orders")
	o := followOrder{ID: 1, Status: "new", Qty: 1, Version: 1}
	err := versioned.UpdateStruct(ctx, db, tbl, &o, versioned.Set("status", "paid"), versioned.Set("qty", 7),
		versioned.Set("note", "gift"), versioned.Set("coupon", "XMAS"), versioned.Set("changed_by", "ann"))
	if err != nil {
		t.Fatal(err)
	}
	var row followOrder
	if err := db.QueryRowContext(ctx, `SELECT id, status, qty, note, coupon, changed_by, version FROM follow_orders WHERE id = 1`).
		Scan(&row.ID, &row.Status, &row.Qty, &row.Note, &row.Coupon, &row.ChangedBy, &row.Version); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o, row) || o.Status != "paid" || o.Qty != 7 || o.Note != (sql.NullString{String: "gift", Valid: true}) ||
		o.Coupon == nil || *o.Coupon != "XMAS" || o.ChangedBy != "ann" || o.Version != 2 {
		t.Fatalf("struct %+v, row %+v", o, row)
	}
	// NULL: nil for the nullable fields.
	if err := versioned.UpdateStruct(ctx, db, tbl, &o, versioned.Set("note", nil), versioned.Set("coupon", nil)); err != nil {
		t.Fatal(err)
	}
	if o.Note.Valid || o.Coupon != nil || o.Version != 3 {
		t.Fatalf("after NULLs: %+v", o)
	}
	// A stale copy: refused, every field unchanged.
	stale := followOrder{ID: 1, Status: "paid", Qty: 7, Version: 2}
	before := stale
	err = versioned.UpdateStruct(ctx, db, tbl, &stale, versioned.Set("status", "refunded"), versioned.Set("qty", 0))
	if !errors.Is(err, versioned.ErrStale) || !reflect.DeepEqual(stale, before) {
		t.Fatalf("stale: %v, struct %+v", err, stale)
	}
}

// A Set the struct could not follow — a column with no field (db:"-"
// included), a value its field cannot hold exactly, NULL for a field that
// cannot be NULL — is *InputError (ErrInvalidArg) naming the column, and
// nothing is sent: the row and the struct are unchanged.
func TestUpdateStructRefusesAnAssignmentTheStructCannotFollow(t *testing.T) {
	ctx := ctxT(t)
	db := followDB(t)
	tbl := versioned.MustTable("follow_orders")
	c := &counting{db: db}
	rows := snapshot(t, db, "follow_orders")
	for _, tc := range []struct {
		name string
		set  versioned.Pair
	}{
		{"no field", versioned.Set("shipped_at", "2026-12-02")},
		{"db:\"-\" field", versioned.Set("scratch", "x")},
		{"overflows int8", versioned.Set("qty", 300)},
		{"fraction for an integer", versioned.Set("qty", 1.5)},
		{"integer for a string", versioned.Set("status", 5)},
		{"NULL for a string", versioned.Set("status", nil)},
		{"bytes for a string", versioned.Set("changed_by", []byte("ann"))},
	} {
		o := followOrder{ID: 1, Status: "new", Qty: 1, Version: 1}
		before := o
		err := versioned.UpdateStruct(ctx, c, tbl, &o, versioned.Set("status", "paid"), tc.set)
		var ie *versioned.InputError
		if !errors.As(err, &ie) || !errors.Is(err, versioned.ErrInvalidArg) || ie.Arg != "set column" {
			t.Errorf("%s: %v, want an *InputError for the set column", tc.name, err)
		}
		if !reflect.DeepEqual(o, before) {
			t.Errorf("%s: struct changed to %+v", tc.name, o)
		}
	}
	if n := c.execs.Load() + c.queries.Load(); n != 0 {
		t.Fatalf("refused writes sent %d statements", n)
	}
	if got := snapshot(t, db, "follow_orders"); got != rows {
		t.Fatalf("rows changed: %s", got)
	}
	// Lossless conversions are taken: an int64 that fits, a float that is
	// a whole number.
	o := followOrder{ID: 1, Status: "new", Qty: 1, Version: 1}
	if err := versioned.UpdateStruct(ctx, db, tbl, &o, versioned.Set("qty", int64(-128)), versioned.Set("status", orderStatus("held"))); err != nil || o.Qty != -128 || o.Status != "held" {
		t.Fatalf("%v %+v", err, o)
	}
	if err := versioned.UpdateStruct(ctx, db, tbl, &o, versioned.Set("qty", 3.0)); err != nil || o.Qty != 3 {
		t.Fatalf("%v %+v", err, o)
	}
}
