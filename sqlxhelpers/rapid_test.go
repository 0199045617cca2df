package sqlxhelpers_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/jmoiron/sqlx/reflectx"
	"github.com/sqlock/sqlock/internal/testing/modeltest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/versioned"
	"pgregory.net/rapid"
)

// TestStructWritesModel runs random sequences of the struct-driven writes —
// Update (all columns, or a Columns subset), Delete, and NamedExec of
// hand-written UPDATE and DELETE statements — from 2–4 stale in-memory
// copies of the same rows, against a table with 1–3 key columns whose
// names, PRIMARY KEY order and struct field order are drawn independently
// (struct types built with reflect.StructOf, keys tagged through db:,
// lock column= or the implicit ID field). After every operation the whole
// table is compared with a reference model: a version never decreases, a
// stale copy's write changes nothing and is *versioned.StaleError, an
// accepted write bumps exactly its row by exactly one, and every refusal
// is a typed error that sends nothing.
//
// Each rapid check resets one table and runs 100–200 operations, so the
// default 100 checks run over 10,000; -rapid.checks=N (or RAPID_CHECKS=N)
// scales it, and a failure prints its seed and failfile.
func TestStructWritesModel(t *testing.T) {
	pg := pgtest.New(t)
	db := sqlx.NewDb(pg.SQL(), "pgx")
	var ops atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		m := newSqlxModel(rt, db)
		m.run(rt)
		ops.Add(int64(m.ops))
	})
	t.Logf("%d operations checked against the model", ops.Load())
}

var (
	sxKeyNames  = []string{"id", "org_id", "user_id", "a", "tenant", "k2"}
	sxVerNames  = []string{"version", "rev", "lock_version"}
	sxNoteNames = []string{"note", "body", "select"}
	sxNotes     = []string{"a", "b", "c", "it's", ":x", ""}
)

type sxRow struct {
	present bool
	note    string
	amount  int64
	version int64
}

type sqlxModel struct {
	db     *sqlx.DB
	h      *sqlxhelpers.Helper
	ctx    context.Context
	table  string
	cols   []string          // key columns, in draw order
	params map[string]string // key column → the named parameter (sqlx name) of its field
	keyIdx map[string]int    // key column → field index
	vcol   string
	ncol   string
	typ    reflect.Type
	noKey  reflect.Type // the same struct without key fields
	keys   [][]int64
	rows   []sxRow
	seen   []int64
	copies [][]reflect.Value
	ops    int
}

func q(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func newSqlxModel(rt *rapid.T, db *sqlx.DB) *sqlxModel {
	m := &sqlxModel{db: db, ctx: context.Background(), params: map[string]string{}, keyIdx: map[string]int{}}
	var err error
	if m.h, err = sqlxhelpers.New(db); err != nil {
		rt.Fatal(err)
	}
	k := rapid.IntRange(1, 3).Draw(rt, "keyCount")
	m.cols = rapid.SliceOfNDistinct(rapid.SampledFrom(sxKeyNames), k, k, rapid.ID[string]).Draw(rt, "keyColumns")
	pkOrder := rapid.Permutation(m.cols).Draw(rt, "primaryKeyOrder")
	m.vcol = rapid.SampledFrom(sxVerNames).Draw(rt, "versionColumn")
	m.ncol = rapid.SampledFrom(sxNoteNames).Draw(rt, "noteColumn")
	m.table = rapid.SampledFrom([]string{"m", "mem bers"}).Draw(rt, "table")

	fieldOrder := rapid.Permutation(m.cols).Draw(rt, "fieldOrder")
	var fields, noKey []reflect.StructField
	names := map[string]string{}
	for i, c := range fieldOrder {
		f := reflect.StructField{Name: "K" + strconv.Itoa(i), Type: reflect.TypeFor[int64]()}
		m.params[c] = c
		switch v := rapid.IntRange(0, 2).Draw(rt, "keyTag"); {
		case k == 1 && c == "id" && v == 2:
			f.Name = "ID" // untagged: sqlx maps it to id, versioned picks it as the key
		case v == 1: // lock column= overrides the db name
			m.params[c] = "p_" + c
			f.Tag = reflect.StructTag(`db:"p_` + c + `" lock:"key,column=` + c + `"`)
		default:
			f.Tag = reflect.StructTag(`db:"` + c + `" lock:"key"`)
		}
		names[c] = f.Name
		fields = append(fields, f)
	}
	rest := []reflect.StructField{
		{Name: "Ver", Type: reflect.TypeFor[int32](), Tag: reflect.StructTag(`db:"` + m.vcol + `" lock:"version"`)},
		{Name: "Note", Type: reflect.TypeFor[string](), Tag: reflect.StructTag(`db:"` + m.ncol + `"`)},
		{Name: "Amount", Type: reflect.TypeFor[int64](), Tag: `db:"amount"`},
	}
	for _, f := range rest {
		at := rapid.IntRange(0, len(fields)).Draw(rt, "fieldAt")
		fields = slices.Insert(fields, at, f)
		noKey = append(noKey, f)
	}
	m.typ = reflect.StructOf(fields)
	m.noKey = reflect.StructOf(noKey)
	for c, name := range names {
		sf, _ := m.typ.FieldByName(name)
		m.keyIdx[c] = sf.Index[0]
	}

	space := 1
	for range k {
		space *= 3
	}
	idx := rapid.SliceOfNDistinct(rapid.IntRange(0, space-1), 2, min(5, space), rapid.ID[int]).Draw(rt, "rows")
	for _, x := range idx {
		key := make([]int64, k)
		for j := range key {
			key[j] = int64(x%3) + 1
			x /= 3
		}
		m.keys = append(m.keys, key)
		m.rows = append(m.rows, sxRow{present: true, note: "init", amount: 0, version: int64(rapid.IntRange(0, 3).Draw(rt, "version"))})
	}
	m.seen = make([]int64, len(m.rows))
	m.reset(rt, pkOrder)
	n := rapid.IntRange(2, 4).Draw(rt, "copies")
	for range n {
		cp := make([]reflect.Value, len(m.rows))
		for r := range m.rows {
			cp[r] = reflect.New(m.typ)
			m.fill(cp[r], r)
		}
		m.copies = append(m.copies, cp)
	}
	return m
}

func (m *sqlxModel) reset(rt *rapid.T, pkOrder []string) {
	var ddl strings.Builder
	fmt.Fprintf(&ddl, "DROP TABLE IF EXISTS m, \"mem bers\"; CREATE TABLE %s (", q(m.table))
	for _, c := range m.cols {
		fmt.Fprintf(&ddl, "%s bigint NOT NULL, ", q(c))
	}
	qk := make([]string, len(pkOrder))
	for i, c := range pkOrder {
		qk[i] = q(c)
	}
	fmt.Fprintf(&ddl, "%s text NOT NULL, amount bigint NOT NULL, %s integer NOT NULL, PRIMARY KEY (%s))",
		q(m.ncol), q(m.vcol), strings.Join(qk, ", "))
	if _, err := m.db.Exec(ddl.String()); err != nil {
		rt.Fatalf("%s: %v", ddl.String(), err)
	}
	for r, key := range m.keys {
		cols := make([]string, 0, len(key)+3)
		ph := make([]string, 0, len(key)+3)
		args := make([]any, 0, len(key)+3)
		for j, c := range m.cols {
			cols = append(cols, q(c))
			args = append(args, key[j])
		}
		cols = append(cols, q(m.ncol), "amount", q(m.vcol))
		args = append(args, m.rows[r].note, m.rows[r].amount, m.rows[r].version)
		for i := range args {
			ph = append(ph, "$"+strconv.Itoa(i+1))
		}
		ins := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", q(m.table), strings.Join(cols, ", "), strings.Join(ph, ", "))
		if _, err := m.db.Exec(ins, args...); err != nil {
			rt.Fatalf("%s: %v", ins, err)
		}
	}
}

// fill sets the copy p of row r to the model's row.
func (m *sqlxModel) fill(p reflect.Value, r int) {
	e := p.Elem()
	for j, c := range m.cols {
		e.Field(m.keyIdx[c]).SetInt(m.keys[r][j])
	}
	e.FieldByName("Note").SetString(m.rows[r].note)
	e.FieldByName("Amount").SetInt(m.rows[r].amount)
	e.FieldByName("Ver").SetInt(m.rows[r].version)
}

func ver(p reflect.Value) int64 { return p.Elem().FieldByName("Ver").Int() }

func (m *sqlxModel) run(rt *rapid.T) {
	n := rapid.IntRange(100, 200).Draw(rt, "ops")
	for range n {
		c := rapid.IntRange(0, len(m.copies)-1).Draw(rt, "copy")
		r := rapid.IntRange(0, len(m.rows)-1).Draw(rt, "row")
		p := m.copies[c][r]
		switch op := rapid.IntRange(0, 99).Draw(rt, "op"); {
		case op < 25:
			m.update(rt, p, r, false)
		case op < 35:
			m.update(rt, p, r, true)
		case op < 45:
			m.delete(rt, p, r)
		case op < 60:
			m.namedUpdate(rt, p, r)
		case op < 65:
			m.namedDelete(rt, p, r)
		case op < 85:
			if m.rows[r].present {
				m.fill(p, r)
			}
		default:
			m.refused(rt, p)
		}
		m.ops++
		m.check(rt)
	}
}

func (m *sqlxModel) fresh(p reflect.Value, r int) bool {
	return m.rows[r].present && m.rows[r].version == ver(p)
}

// write runs a versioned write of the copy p of row r and checks its
// outcome against the model: apply changes the model on success.
func (m *sqlxModel) write(rt *rapid.T, what string, p reflect.Value, r int, op string, do func() error, apply func(*sxRow)) {
	before := ver(p)
	ok := m.fresh(p, r)
	err := do()
	if ok {
		if err != nil {
			rt.Fatalf("%s of a fresh copy: %v", what, err)
		}
		if op == "delete" {
			m.rows[r].present = false
			return
		}
		apply(&m.rows[r])
		m.rows[r].version++
		if ver(p) != before+1 {
			rt.Fatalf("%s: struct version %d after %d", what, ver(p), before)
		}
		return
	}
	var se *versioned.StaleError
	if !errors.As(err, &se) || !errors.Is(err, versioned.ErrStale) || se.Op != op {
		rt.Fatalf("%s of a stale copy: %v, want *versioned.StaleError", what, err)
	}
	if ver(p) != before {
		rt.Fatalf("%s: a stale write changed the struct's version %d → %d", what, before, ver(p))
	}
}

func (m *sqlxModel) update(rt *rapid.T, p reflect.Value, r int, subset bool) {
	note := rapid.SampledFrom(sxNotes).Draw(rt, "note")
	amount := int64(rapid.IntRange(-5, 5).Draw(rt, "amount"))
	e := p.Elem()
	e.FieldByName("Note").SetString(note)
	e.FieldByName("Amount").SetInt(amount)
	var opts []sqlxhelpers.WriteOption
	if subset {
		opts = append(opts, sqlxhelpers.Columns(m.ncol))
	}
	m.write(rt, "Update", p, r, "update",
		func() error { return m.h.Update(m.ctx, m.table, p.Interface(), opts...) },
		func(row *sxRow) {
			row.note = note
			if !subset {
				row.amount = amount
			}
		})
}

func (m *sqlxModel) delete(rt *rapid.T, p reflect.Value, r int) {
	m.write(rt, "Delete", p, r, "delete",
		func() error { return m.h.Delete(m.ctx, m.table, p.Interface()) }, nil)
}

// where returns "k1" = :p1 AND … with the key columns in a drawn order.
func (m *sqlxModel) where(rt *rapid.T) string {
	order := rapid.Permutation(m.cols).Draw(rt, "whereOrder")
	conds := make([]string, len(order))
	for i, c := range order {
		conds[i] = q(c) + " = :" + m.params[c]
	}
	return strings.Join(conds, " AND ")
}

func (m *sqlxModel) namedUpdate(rt *rapid.T, p reflect.Value, r int) {
	note := rapid.SampledFrom(sxNotes).Draw(rt, "note")
	p.Elem().FieldByName("Note").SetString(note)
	stmt := fmt.Sprintf("UPDATE %s SET %s = :%s, amount = amount + 1 WHERE %s", q(m.table), q(m.ncol), m.ncol, m.where(rt))
	m.write(rt, "NamedExec UPDATE", p, r, "update",
		func() error { return m.h.NamedExec(m.ctx, stmt, p.Interface()) },
		func(row *sxRow) { row.note = note; row.amount++ })
}

func (m *sqlxModel) namedDelete(rt *rapid.T, p reflect.Value, r int) {
	stmt := fmt.Sprintf("DELETE FROM %s WHERE %s", q(m.table), m.where(rt))
	m.write(rt, "NamedExec DELETE", p, r, "delete",
		func() error { return m.h.NamedExec(m.ctx, stmt, p.Interface()) }, nil)
}

// countingExec counts the statements that reach the database.
type countingExec struct {
	db *sqlx.DB
	n  atomic.Int64
}

func (c *countingExec) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.n.Add(1)
	return c.db.ExecContext(ctx, query, args...)
}

// refused sends writes that must be refused with a typed error, sending
// nothing and changing nothing.
func (m *sqlxModel) refused(rt *rapid.T, p reflect.Value) {
	cnt := &countingExec{db: m.db}
	h := m.h.On(cnt)
	before := ver(p)
	isInput := func(err error) bool {
		var ie *versioned.InputError
		return errors.As(err, &ie) && errors.Is(err, versioned.ErrInvalidArg)
	}
	isKey := func(err error) bool {
		var ke *versioned.KeyError
		return errors.As(err, &ke) && errors.Is(err, versioned.ErrNoKey)
	}
	var err error
	var want func(error) bool
	switch kind := rapid.IntRange(0, 6).Draw(rt, "refusal"); kind {
	case 0: // a zero key value
		z := reflect.New(m.typ)
		z.Elem().Set(p.Elem())
		z.Elem().Field(m.keyIdx[rapid.SampledFrom(m.cols).Draw(rt, "zeroKey")]).SetInt(0)
		if rapid.Bool().Draw(rt, "zeroKeyDelete") {
			err = h.Delete(m.ctx, m.table, z.Interface())
		} else {
			err = h.Update(m.ctx, m.table, z.Interface())
		}
		want = isKey
	case 1: // no key field at all
		nk := reflect.New(m.noKey)
		nk.Elem().FieldByName("Ver").SetInt(ver(p))
		err = h.Update(m.ctx, m.table, nk.Interface())
		want = isKey
	case 2: // Columns naming the version column
		err = h.Update(m.ctx, m.table, p.Interface(), sqlxhelpers.Columns(m.vcol))
		want = isInput
	case 3: // Columns naming no column of the struct
		err = h.Update(m.ctx, m.table, p.Interface(), sqlxhelpers.Columns("nope"))
		want = isInput
	case 4: // not a pointer
		err = h.Delete(m.ctx, m.table, p.Elem().Interface())
		want = isInput
	case 5: // a named statement without WHERE
		err = h.NamedExec(m.ctx, fmt.Sprintf("UPDATE %s SET amount = :amount", q(m.table)), p.Interface())
		want = func(err error) bool {
			var re *sqlxhelpers.RewriteError
			return errors.As(err, &re) && sqlxhelpers.KindOf(err) == "no-where"
		}
	case 6: // a named parameter no field maps to
		err = h.NamedExec(m.ctx, fmt.Sprintf("DELETE FROM %s WHERE %s AND amount = :nosuch", q(m.table), m.where(rt)), p.Interface())
		want = func(err error) bool {
			var be *sqlxhelpers.BindError
			return errors.As(err, &be) && errors.Is(err, sqlxhelpers.ErrBind)
		}
	}
	if !want(err) {
		rt.Fatalf("refusal: got %T %v", err, err)
	}
	if n := cnt.n.Load(); n != 0 {
		rt.Fatalf("a refused write sent %d statements", n)
	}
	if ver(p) != before {
		rt.Fatalf("a refused write changed the struct's version %d → %d", before, ver(p))
	}
}

// check compares the whole table with the model.
func (m *sqlxModel) check(rt *rapid.T) {
	cols := make([]string, 0, len(m.cols)+3)
	for _, c := range m.cols {
		cols = append(cols, q(c))
	}
	cols = append(cols, q(m.ncol), "amount", q(m.vcol))
	rows, err := m.db.Query(fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), q(m.table)))
	if err != nil {
		rt.Fatalf("snapshot: %v", err)
	}
	defer rows.Close()
	got := map[string]sxRow{}
	for rows.Next() {
		key := make([]int64, len(m.cols))
		dest := make([]any, 0, len(key)+3)
		for i := range key {
			dest = append(dest, &key[i])
		}
		row := sxRow{present: true}
		dest = append(dest, &row.note, &row.amount, &row.version)
		if err := rows.Scan(dest...); err != nil {
			rt.Fatalf("scan: %v", err)
		}
		got[fmt.Sprint(key)] = row
	}
	if err := rows.Err(); err != nil {
		rt.Fatalf("snapshot: %v", err)
	}
	modeltest.Compare(rt, got, m.keys, m.rows, func(r sxRow) bool { return r.present }, func(r sxRow) int64 { return r.version }, m.seen)
}

// TestStructWritesMatchKeysByName: Update, Delete and NamedExec target the
// row by the key fields' column names, whatever order the fields are
// declared in: with UserID declared before OrgID, the write for (org 1,
// user 2) touches that row and not (org 2, user 1).
func TestStructWritesMatchKeysByName(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE memberships (org_id bigint, user_id bigint, role text NOT NULL,
			version integer NOT NULL DEFAULT 0, PRIMARY KEY (org_id, user_id));
		INSERT INTO memberships VALUES (1, 2, 'member', 0), (2, 1, 'member', 0)`)
	db := sqlx.NewDb(pg.SQL(), "pgx")
	h := newHelper(t, db)
	ctx := context.Background()
	type membership struct {
		UserID  int64  `db:"user_id" lock:"key"`
		OrgID   int64  `db:"org_id" lock:"key"`
		Role    string `db:"role"`
		Version int32  `db:"version" lock:"version"`
	}
	snap := func() string {
		var s string
		if err := db.Get(&s, `SELECT string_agg(m::text, ' ' ORDER BY m::text) FROM memberships m`); err != nil {
			t.Fatal(err)
		}
		return s
	}
	m := membership{OrgID: 1, UserID: 2, Role: "admin"}
	if err := h.Update(ctx, "memberships", &m); err != nil || m.Version != 1 {
		t.Fatalf("Update: %v (version %d)", err, m.Version)
	}
	if got := snap(); got != "(1,2,admin,1) (2,1,member,0)" {
		t.Fatalf("after Update: %s", got)
	}
	m.Role = "owner"
	if err := h.NamedExec(ctx, `UPDATE memberships SET role = :role WHERE org_id = :org_id AND user_id = :user_id`, &m); err != nil {
		t.Fatalf("NamedExec: %v", err)
	}
	if got := snap(); got != "(1,2,owner,2) (2,1,member,0)" {
		t.Fatalf("after NamedExec: %s", got)
	}
	if err := h.Delete(ctx, "memberships", &m); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := snap(); got != "(2,1,member,0)" {
		t.Fatalf("after Delete: %s", got)
	}
}

// TestImplicitKeyFollowsTheMapper: without lock:"key" tags the key is the
// field whose column is id. With a mapper that names columns differently
// from package versioned's default (json tags here), a field called ID that
// the mapper maps to another column is not taken as the key: the write is
// refused with *versioned.KeyError and nothing is sent, rather than
// targeting rows by a column that may not be unique.
func TestImplicitKeyFollowsTheMapper(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE items (id bigint PRIMARY KEY, order_id bigint NOT NULL, note text,
			version integer NOT NULL DEFAULT 0);
		INSERT INTO items VALUES (1, 7, 'a', 0), (2, 7, 'b', 0)`)
	db := sqlx.NewDb(pg.SQL(), "pgx")
	h := newHelper(t, db, sqlxhelpers.WithMapper(reflectx.NewMapperFunc("json", strings.ToLower)))
	type item struct {
		ID      int64  `json:"order_id"`
		Ref     int64  `json:"id"`
		Note    string `json:"note"`
		Version int32  `json:"version" lock:"version"`
	}
	cnt := &countingExec{db: db}
	it := item{ID: 7, Ref: 1, Note: "x"}
	for _, err := range []error{
		h.On(cnt).Update(context.Background(), "items", &it),
		h.On(cnt).Delete(context.Background(), "items", &it),
	} {
		var ke *versioned.KeyError
		if !errors.As(err, &ke) || !errors.Is(err, versioned.ErrNoKey) {
			t.Fatalf("got %v, want *versioned.KeyError", err)
		}
	}
	if cnt.n.Load() != 0 || it.Version != 0 {
		t.Fatalf("sent %d statements, version %d", cnt.n.Load(), it.Version)
	}
	var notes string
	if err := db.Get(&notes, `SELECT string_agg(note || version, ',' ORDER BY id) FROM items`); err != nil || notes != "a0,b0" {
		t.Fatalf("rows: %s %v", notes, err)
	}
}
