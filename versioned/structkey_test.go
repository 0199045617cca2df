package versioned_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/versioned"
)

// membership declares its key fields in the opposite order of the table's
// key columns.
type membership struct {
	UserID  int64 `lock:"key"`
	OrgID   int64 `lock:"key"`
	Role    string
	Version int64 `lock:"version"`
}

func membershipsDB(t *testing.T) *pgtest.DB {
	t.Helper()
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE memberships (org_id bigint, user_id bigint, role text NOT NULL,
			version bigint NOT NULL DEFAULT 0, PRIMARY KEY (org_id, user_id));
		INSERT INTO memberships VALUES (1, 2, 'member', 0), (2, 1, 'member', 0)`)
	return pg
}

// UpdateStruct and DeleteStruct match the struct's key fields to the
// Table's key columns by name: declared UserID, OrgID against
// WithKey("org_id", "user_id"), the write for (org 1, user 2) touches that
// row and no other.
func TestUpdateStructMatchesKeysByName(t *testing.T) {
	pg := membershipsDB(t)
	db := pg.SQL()
	ctx := ctxT(t)
	tbl := versioned.MustTable("memberships", versioned.WithKey("org_id", "user_id"))
	m := membership{OrgID: 1, UserID: 2}
	if err := versioned.UpdateStruct(ctx, db, tbl, &m, versioned.Set("role", "admin")); err != nil || m.Version != 1 {
		t.Fatalf("UpdateStruct: %v, version %d", err, m.Version)
	}
	if got := snapshot(t, db, "memberships"); got != "(1,2,admin,1) | (2,1,member,0)" {
		t.Fatalf("rows after update: %s", got)
	}
	if err := versioned.DeleteStruct(ctx, db, tbl, &m); err != nil {
		t.Fatalf("DeleteStruct: %v", err)
	}
	if got := snapshot(t, db, "memberships"); got != "(2,1,member,0)" {
		t.Fatalf("rows after delete: %s", got)
	}
}

// A single-key Table whose key column is not the field the struct's model
// picks (the id field) is matched by name too: the key field for
// "order_id" is OrderID, or the write is refused.
func TestSingleKeyStructMatchesTableKeyByName(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE lines (id bigint, order_id bigint PRIMARY KEY, note text,
			version bigint NOT NULL DEFAULT 0);
		INSERT INTO lines VALUES (1, 2, 'a', 0), (2, 1, 'b', 0)`)
	db := pg.SQL()
	ctx := ctxT(t)
	tbl := versioned.MustTable("lines", versioned.WithKey("order_id"))

	// The model's implicit key is ID (column id): not the Table's key.
	type implicit struct {
		ID      int64
		OrderID int64
		Version int64 `lock:"version"`
	}
	c := &counting{db: db}
	l := implicit{ID: 1, OrderID: 2}
	err := versioned.UpdateStruct(ctx, c, tbl, &l, versioned.Set("note", "x"))
	var ke *versioned.KeyError
	if !errors.As(err, &ke) || !errors.Is(err, versioned.ErrNoKey) || l.Version != 0 {
		t.Fatalf("UpdateStruct with the key on the wrong field: %v (version %d)", err, l.Version)
	}
	if err := versioned.DeleteStruct(ctx, c, tbl, &l); !errors.As(err, &ke) {
		t.Fatalf("DeleteStruct with the key on the wrong field: %v", err)
	}
	if c.execs.Load() != 0 || c.queries.Load() != 0 {
		t.Fatalf("refused writes sent %d statements", c.execs.Load()+c.queries.Load())
	}

	// Tagged by name, it writes the row whose order_id is 2.
	type tagged struct {
		ID      int64
		OrderID int64 `lock:"key"`
		Note    string
		Version int64 `lock:"version"`
	}
	g := tagged{ID: 1, OrderID: 2}
	if err := versioned.UpdateStruct(ctx, db, tbl, &g, versioned.Set("note", "x")); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, db, "lines"); got != "(1,2,x,1) | (2,1,b,0)" {
		t.Fatalf("rows: %s", got)
	}
}

// A struct that lacks a field for a key column, has a key field mapped to
// no key column, or two key fields for one column is refused with
// *KeyError (ErrNoKey) before anything is sent, and the struct is
// unchanged.
func TestStructKeyMismatchRefused(t *testing.T) {
	pg := membershipsDB(t)
	db := pg.SQL()
	ctx := ctxT(t)
	before := snapshot(t, db, "memberships")
	two := versioned.MustTable("memberships", versioned.WithKey("org_id", "user_id"))
	one := versioned.MustTable("memberships", versioned.WithKey("org_id"))

	type onlyOrg struct {
		OrgID   int64 `lock:"key"`
		Version int64 `lock:"version"`
	}
	type extra struct {
		OrgID    int64 `lock:"key"`
		UserID   int64 `lock:"key"`
		TenantID int64 `lock:"key"`
		Version  int64 `lock:"version"`
	}
	type renamed struct {
		Org     int64 `lock:"key,column=org"`
		UserID  int64 `lock:"key"`
		Version int64 `lock:"version"`
	}
	type twice struct {
		A       int64 `lock:"key,column=org_id"`
		B       int64 `lock:"key,column=org_id"`
		Version int64 `lock:"version"`
	}
	cases := []struct {
		name   string
		t      *versioned.Table
		ptr    any
		column string
	}{
		{"lacks a key column", two, &onlyOrg{OrgID: 1}, "user_id"},
		{"extra key field", two, &extra{OrgID: 1, UserID: 2, TenantID: 3}, "tenant_id"},
		{"key field named differently", two, &renamed{Org: 1, UserID: 2}, "org"},
		{"composite struct, single-key table", one, &membership{OrgID: 1, UserID: 2}, "user_id"},
		{"two fields for one column", one, &twice{A: 1, B: 2}, "org_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cnt := &counting{db: db}
			for _, write := range []func() error{
				func() error { return versioned.UpdateStruct(ctx, cnt, c.t, c.ptr, versioned.Set("role", "x")) },
				func() error { return versioned.DeleteStruct(ctx, cnt, c.t, c.ptr) },
			} {
				err := write()
				var ke *versioned.KeyError
				if !errors.As(err, &ke) || !errors.Is(err, versioned.ErrNoKey) || ke.Column != c.column || ke.Table != "memberships" {
					t.Fatalf("got %v (%#v), want a *KeyError for column %q", err, ke, c.column)
				}
				if v, _ := vmodel.VersionOf(c.ptr); v != 0 {
					t.Fatalf("struct version changed to %d", v)
				}
			}
			if cnt.execs.Load()+cnt.queries.Load() != 0 {
				t.Fatalf("refused writes sent %d statements", cnt.execs.Load()+cnt.queries.Load())
			}
		})
	}
	if got := snapshot(t, db, "memberships"); got != before {
		t.Fatalf("rows changed: %s", got)
	}
}

// A probe that finds the row's version NULL says so: "NULL", with
// CurrentNull set, never "version 0".
func TestProbeReportsNullVersion(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE loose (id bigint PRIMARY KEY, note text, version bigint);
		INSERT INTO loose VALUES (1, 'a', NULL), (2, 'b', 0)`)
	db := pg.SQL()
	ctx := ctxT(t)
	tbl := versioned.MustTable("loose", versioned.WithProbe())
	_, err := versioned.Update(ctx, db, tbl, int64(1), int64(0), versioned.Set("note", "x"))
	var se *versioned.StaleError
	if !errors.As(err, &se) || !rowChanged(se) || !se.CurrentNull || se.Current != 0 {
		t.Fatalf("NULL version: %v (%+v)", err, se)
	}
	if msg := err.Error(); !strings.Contains(msg, "version is NULL") || strings.Contains(msg, "now at version") {
		t.Fatalf("message %q", msg)
	}
	// A real version 0 that is not the expected one is reported as a number.
	_, err = versioned.Update(ctx, db, tbl, int64(2), int64(5), versioned.Set("note", "x"))
	if !errors.As(err, &se) || se.CurrentNull || se.Current != 0 || !strings.Contains(err.Error(), "now at version 0") {
		t.Fatalf("version 0: %v (%+v)", err, se)
	}
}
