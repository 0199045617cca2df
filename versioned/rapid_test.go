package versioned_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	_ "github.com/glebarez/go-sqlite"
	"github.com/sqlock/sqlock/internal/testing/modeltest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/versioned"
	"pgregory.net/rapid"
)

// The model-based tests below run random sequences of UpdateStruct,
// DeleteStruct and CompareAndSwap from 2–4 stale in-memory copies of the
// same rows (replicas that read at different times), against a table with
// 1–3 key columns whose names, Table key order, PRIMARY KEY order and
// struct field order are all drawn independently; struct types are built
// with reflect.StructOf. After every operation the whole table is compared
// with a reference model.
//
// Each rapid check resets one table on one database and runs 100–200
// operations on PostgreSQL (30–60 on SQLite, 10–20 under -race), so the
// default 100 checks run over 10,000 on PostgreSQL.
// `go test -rapid.checks=N` (or RAPID_CHECKS=N) scales it; a failure
// prints the seed and a failfile for -rapid.seed / -rapid.failfile.

var (
	keyNames  = []string{"id", "org_id", "user_id", "a", "B", `we"ird`, "x y", "tenant"}
	verNames  = []string{"version", "rev", "lock_version", `v"er`}
	noteNames = []string{"note", "from", "select"}
	verTypes  = map[string]reflect.Type{"int64": reflect.TypeFor[int64](), "int32": reflect.TypeFor[int32](),
		"int": reflect.TypeFor[int](), "uint32": reflect.TypeFor[uint32]()}
	notes = []string{"a", "b", "c", "it's", ""}
)

// modelOps counts the operations the model tests ran, for the log.
var modelOps atomic.Int64

type modelDB struct {
	db       *sql.DB
	dialect  versioned.Dialect
	min, max int // operations per check
}

func TestStructWritesModelPostgres(t *testing.T) {
	pg := pgtest.New(t)
	runStructModel(t, modelDB{db: pg.SQL(), dialect: versioned.Postgres, min: 100, max: 200})
}

func TestStructWritesModelSQLite(t *testing.T) {
	// One connection, no fsync: the model needs SQLite's SQL, not its
	// durability, and the test stays fast on a busy machine.
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db")+"?_pragma=synchronous(off)&_pragma=journal_mode(memory)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// Fewer operations per check: pure-Go SQLite is slow, and ten times
	// slower under -race.
	env := modelDB{db: db, dialect: versioned.SQLite, min: 30, max: 60}
	if raceEnabled {
		env.min, env.max = 10, 20
	}
	runStructModel(t, env)
}

func runStructModel(t *testing.T, env modelDB) {
	before := modelOps.Load()
	rapid.Check(t, func(rt *rapid.T) { newStructModel(rt, env).run(rt) })
	t.Logf("%d operations checked against the model", modelOps.Load()-before)
}

// modelRow is a row of the reference model.
type modelRow struct {
	present bool
	version int64
	note    string
}

type structModel struct {
	env     modelDB
	ctx     context.Context
	q       func(string) string // quotes an identifier
	table   string
	cols    []string // key columns in draw order (the model's canonical order)
	tblKeys []string // the Table's key order (WithKey)
	vcol    string
	ncol    string
	tbl     *versioned.Table
	probe   bool
	typ     reflect.Type // the struct type
	keyIdx  map[string]int
	keys    [][]int64 // per row: key values in cols order
	rows    []modelRow
	copies  [][]reflect.Value // per copy, per row: a *struct
	wrong   []wrongType
	seen    []int64 // highest version seen per row, for monotonicity
}

// wrongType is a struct type whose key fields do not match the Table.
type wrongType struct {
	typ    reflect.Type
	column string // the column the KeyError must name
	kind   string
}

func newStructModel(rt *rapid.T, env modelDB) *structModel {
	m := &structModel{env: env, ctx: context.Background(), keyIdx: map[string]int{}}
	m.q = func(s string) string { q, _ := env.dialect.QuoteIdent(s); return q }
	k := rapid.IntRange(1, 3).Draw(rt, "keyCount")
	m.cols = rapid.SliceOfNDistinct(rapid.SampledFrom(keyNames), k, k, rapid.ID[string]).Draw(rt, "keyColumns")
	m.tblKeys = rapid.Permutation(m.cols).Draw(rt, "tableKeyOrder")
	pkOrder := rapid.Permutation(m.cols).Draw(rt, "primaryKeyOrder")
	m.vcol = rapid.SampledFrom(verNames).Draw(rt, "versionColumn")
	m.ncol = rapid.SampledFrom(noteNames).Draw(rt, "noteColumn")
	m.table = rapid.SampledFrom([]string{"m", "mem bers", `t"x`}).Draw(rt, "table")
	m.probe = rapid.Bool().Draw(rt, "probe")

	// The struct: key fields in their own order, tagged by column= or db:,
	// or (one key named id) the untagged ID field the model picks.
	fieldOrder := rapid.Permutation(m.cols).Draw(rt, "fieldOrder")
	vt := verTypes[rapid.SampledFrom([]string{"int64", "int32", "int", "uint32"}).Draw(rt, "versionType")]
	var fields []reflect.StructField
	names := map[string]string{} // key column → field name
	for i, c := range fieldOrder {
		f := reflect.StructField{Name: "K" + strconv.Itoa(i), Type: reflect.TypeFor[int64]()}
		switch {
		case k == 1 && c == "id" && rapid.Bool().Draw(rt, "implicitID"):
			f.Name = "ID"
		case !strings.ContainsAny(c, `" `) && rapid.Bool().Draw(rt, "dbTag"):
			f.Tag = reflect.StructTag(`db:"` + c + `" lock:"key"`)
		default:
			f.Tag = reflect.StructTag(`lock:` + strconv.Quote("key,column="+c))
		}
		names[c] = f.Name
		fields = append(fields, f)
	}
	// The note's field maps to the note column, so the struct follows
	// the row's note after an update.
	note := reflect.StructField{Name: "Note", Type: reflect.TypeFor[string](), Tag: reflect.StructTag(`db:"` + m.ncol + `"`)}
	ver := reflect.StructField{Name: "Ver", Type: vt, Tag: reflect.StructTag(`lock:` + strconv.Quote("version,column="+m.vcol))}
	at := rapid.IntRange(0, len(fields)).Draw(rt, "versionAt")
	fields = slices.Insert(fields, at, ver)
	fields = append(fields, note)
	m.typ = reflect.StructOf(fields)
	for c, name := range names {
		sf, _ := m.typ.FieldByName(name)
		m.keyIdx[c] = sf.Index[0]
	}
	m.wrong = m.wrongTypes(rt, fields)

	opts := []versioned.Option{versioned.WithDialect(env.dialect), versioned.WithKey(m.tblKeys...), versioned.WithVersionColumn(m.vcol)}
	if m.probe {
		opts = append(opts, versioned.WithProbe())
	}
	var err error
	if m.tbl, err = versioned.NewTable(m.table, opts...); err != nil {
		rt.Fatalf("NewTable: %v", err)
	}

	// Rows: distinct key tuples over 1..3 per column, so that (1, 2) and
	// (2, 1) are both there when the key has two columns.
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
		m.rows = append(m.rows, modelRow{present: true, version: int64(rapid.IntRange(0, 3).Draw(rt, "version")), note: "init"})
	}
	m.seen = make([]int64, len(m.rows))
	m.reset(rt, pkOrder)

	n := rapid.IntRange(2, 4).Draw(rt, "copies")
	for range n {
		cp := make([]reflect.Value, len(m.rows))
		for r := range m.rows {
			cp[r] = m.newStruct(r)
		}
		m.copies = append(m.copies, cp)
	}
	return m
}

// wrongTypes builds struct types that must be refused: one lacking a key
// field, one with an extra key field, one with a key field renamed.
func (m *structModel) wrongTypes(rt *rapid.T, fields []reflect.StructField) []wrongType {
	isKey := func(f reflect.StructField) bool {
		return f.Name == "ID" || strings.HasPrefix(f.Name, "K")
	}
	colOf := func(f reflect.StructField) string {
		if f.Name == "ID" {
			return "id"
		}
		if db := f.Tag.Get("db"); db != "" {
			return db
		}
		c, _ := strings.CutPrefix(f.Tag.Get("lock"), "key,column=")
		return c
	}
	var out []wrongType
	// lacking: drop the first key field
	var lack []reflect.StructField
	dropped := ""
	for _, f := range fields {
		if isKey(f) && dropped == "" {
			dropped = colOf(f)
			continue
		}
		lack = append(lack, f)
	}
	out = append(out, wrongType{typ: reflect.StructOf(lack), column: dropped, kind: "lacking"})
	// extra
	extra := append(slices.Clone(fields), reflect.StructField{Name: "Extra", Type: reflect.TypeFor[int64](), Tag: `lock:"key,column=zz_extra"`})
	out = append(out, wrongType{typ: reflect.StructOf(extra), column: "zz_extra", kind: "extra"})
	// renamed: the last key field maps to another column
	ren := slices.Clone(fields)
	for i := len(ren) - 1; i >= 0; i-- {
		if isKey(ren[i]) {
			c := colOf(ren[i]) + "_x"
			ren[i].Name = "Renamed"
			ren[i].Tag = reflect.StructTag(`lock:` + strconv.Quote("key,column="+c))
			out = append(out, wrongType{typ: reflect.StructOf(ren), column: c, kind: "renamed"})
			break
		}
	}
	return out
}

func (m *structModel) reset(rt *rapid.T, pkOrder []string) {
	qt := m.q(m.table)
	var ddl strings.Builder
	fmt.Fprintf(&ddl, "CREATE TABLE %s (", qt)
	for _, c := range m.cols {
		fmt.Fprintf(&ddl, "%s bigint NOT NULL, ", m.q(c))
	}
	fmt.Fprintf(&ddl, "%s text, %s bigint NOT NULL, PRIMARY KEY (", m.q(m.ncol), m.q(m.vcol))
	for i, c := range pkOrder {
		if i > 0 {
			ddl.WriteString(", ")
		}
		ddl.WriteString(m.q(c))
	}
	ddl.WriteString("))")
	for _, tn := range []string{"m", "mem bers", `t"x`} {
		if _, err := m.env.db.Exec("DROP TABLE IF EXISTS " + m.q(tn)); err != nil {
			rt.Fatalf("drop: %v", err)
		}
	}
	if _, err := m.env.db.Exec(ddl.String()); err != nil {
		rt.Fatalf("%s: %v", ddl.String(), err)
	}
	for r, key := range m.keys {
		ph := make([]string, len(m.cols)+2)
		args := make([]any, 0, len(ph))
		for i := range ph {
			ph[i] = m.env.dialect.Placeholder(i + 1)
		}
		for _, v := range key {
			args = append(args, v)
		}
		args = append(args, m.rows[r].note, m.rows[r].version)
		cols := make([]string, 0, len(ph))
		for _, c := range m.cols {
			cols = append(cols, m.q(c))
		}
		cols = append(cols, m.q(m.ncol), m.q(m.vcol))
		ins := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", qt, strings.Join(cols, ", "), strings.Join(ph, ", "))
		if _, err := m.env.db.Exec(ins, args...); err != nil {
			rt.Fatalf("%s: %v", ins, err)
		}
	}
}

// newStruct returns a *struct holding row r as the model has it now.
func (m *structModel) newStruct(r int) reflect.Value {
	p := reflect.New(m.typ)
	m.fill(p, r)
	return p
}

func (m *structModel) fill(p reflect.Value, r int) {
	e := p.Elem()
	for j, c := range m.cols {
		e.Field(m.keyIdx[c]).SetInt(m.keys[r][j])
	}
	e.FieldByName("Note").SetString(m.rows[r].note)
	if err := vmodel.SetVersion(p.Interface(), m.rows[r].version); err != nil {
		panic(err)
	}
}

func versionOf(rt *rapid.T, p reflect.Value) int64 {
	v, err := vmodel.VersionOf(p.Interface())
	if err != nil {
		rt.Fatalf("VersionOf: %v", err)
	}
	return v
}

// tableKey returns the key of row r, taken from the copy's struct, in the
// Table's key order.
func (m *structModel) tableKey(p reflect.Value) any {
	e := p.Elem()
	if len(m.tblKeys) == 1 {
		return e.Field(m.keyIdx[m.tblKeys[0]]).Int()
	}
	ck := make(versioned.CompositeKey, len(m.tblKeys))
	for i, c := range m.tblKeys {
		ck[i] = e.Field(m.keyIdx[c]).Int()
	}
	return ck
}

func (m *structModel) run(rt *rapid.T) {
	n := rapid.IntRange(m.env.min, m.env.max).Draw(rt, "ops")
	for range n {
		c := rapid.IntRange(0, len(m.copies)-1).Draw(rt, "copy")
		r := rapid.IntRange(0, len(m.rows)-1).Draw(rt, "row")
		p := m.copies[c][r]
		switch op := rapid.IntRange(0, 99).Draw(rt, "op"); {
		case op < 35:
			m.update(rt, p, r)
		case op < 45:
			m.delete(rt, p, r)
		case op < 65:
			m.cas(rt, p, r)
		case op < 85:
			if m.rows[r].present { // the copy re-reads the row
				m.fill(p, r)
			}
		default:
			m.refused(rt, p, r)
		}
		modelOps.Add(1)
		m.check(rt)
	}
}

// fresh reports whether the copy p of row r may write: the row is there at
// the copy's version.
func (m *structModel) fresh(rt *rapid.T, p reflect.Value, r int) bool {
	return m.rows[r].present && m.rows[r].version == versionOf(rt, p)
}

func (m *structModel) update(rt *rapid.T, p reflect.Value, r int) {
	note := rapid.SampledFrom(notes).Draw(rt, "note")
	before, beforeNote := versionOf(rt, p), p.Elem().FieldByName("Note").String()
	ok := m.fresh(rt, p, r)
	err := versioned.UpdateStruct(m.ctx, m.env.db, m.tbl, p.Interface(), versioned.Set(m.ncol, note))
	if ok {
		if err != nil {
			rt.Fatalf("UpdateStruct of a fresh copy: %v", err)
		}
		m.rows[r].version++
		m.rows[r].note = note
		if got := versionOf(rt, p); got != before+1 {
			rt.Fatalf("struct version %d after update from %d", got, before)
		}
		if got := p.Elem().FieldByName("Note").String(); got != note {
			rt.Fatalf("struct note %q after Set(%q, %q): the struct did not follow the row", got, m.ncol, note)
		}
		return
	}
	m.wantStale(rt, err, r, "update")
	if got := versionOf(rt, p); got != before {
		rt.Fatalf("stale UpdateStruct changed the struct's version %d → %d", before, got)
	}
	if got := p.Elem().FieldByName("Note").String(); got != beforeNote {
		rt.Fatalf("stale UpdateStruct changed the struct's note %q → %q", beforeNote, got)
	}
}

func (m *structModel) delete(rt *rapid.T, p reflect.Value, r int) {
	ok := m.fresh(rt, p, r)
	err := versioned.DeleteStruct(m.ctx, m.env.db, m.tbl, p.Interface())
	if ok {
		if err != nil {
			rt.Fatalf("DeleteStruct of a fresh copy: %v", err)
		}
		m.rows[r].present = false
		return
	}
	m.wantStale(rt, err, r, "delete")
}

// cas swaps the version (and note) by compare-and-swap on the version, and
// on the note too when drawn so.
func (m *structModel) cas(rt *rapid.T, p reflect.Value, r int) {
	note := rapid.SampledFrom(notes).Draw(rt, "note")
	cur := versionOf(rt, p)
	myNote := p.Elem().FieldByName("Note").String()
	expect := []versioned.Pair{versioned.Eq(m.vcol, cur)}
	withNote := rapid.Bool().Draw(rt, "casOnNote")
	if withNote {
		expect = append(expect, versioned.Eq(m.ncol, myNote))
	}
	res, err := versioned.CompareAndSwap(m.ctx, m.env.db, m.tbl, m.tableKey(p), expect,
		versioned.Set(m.ncol, note), versioned.Set(m.vcol, cur+1))
	if err != nil {
		rt.Fatalf("CompareAndSwap: %v", err)
	}
	row := &m.rows[r]
	want := versioned.Lost
	switch {
	case !row.present:
		want = versioned.Missing
	case row.version == cur && (!withNote || row.note == myNote):
		want = versioned.Won
	}
	if res != want {
		rt.Fatalf("CompareAndSwap = %v, the model says %v", res, want)
	}
	if res == versioned.Won {
		row.version++
		row.note = note
		m.fill(p, r)
	}
}

func (m *structModel) wantStale(rt *rapid.T, err error, r int, op string) {
	var se *versioned.StaleError
	if !errors.As(err, &se) || !errors.Is(err, versioned.ErrStale) || se.Op != op {
		rt.Fatalf("%v of a stale copy: %v, want *StaleError", op, err)
	}
	if !m.probe {
		return
	}
	switch row := m.rows[r]; {
	case !row.present && !se.Gone:
		rt.Fatalf("probe of a deleted row: %v", err)
	case row.present && (!rowChanged(se) || se.Current != row.version):
		rt.Fatalf("probe of a row at version %d: %v", row.version, err)
	}
}

// refused sends writes that must be refused with a typed error, changing
// nothing and sending nothing.
func (m *structModel) refused(rt *rapid.T, p reflect.Value, r int) {
	cnt := &counting{db: m.env.db}
	before := versionOf(rt, p)
	var err error
	var check func(error) bool
	switch kind := rapid.IntRange(0, 4).Draw(rt, "refusal"); kind {
	case 0, 1: // a struct whose key fields do not match the Table
		w := m.wrong[rapid.IntRange(0, len(m.wrong)-1).Draw(rt, "wrongType")]
		wp := reflect.New(w.typ)
		for i := range wp.Elem().NumField() {
			if f := wp.Elem().Field(i); f.Kind() == reflect.Int64 && w.typ.Field(i).Name != "Ver" {
				f.SetInt(int64(i + 1))
			}
		}
		if kind == 0 {
			err = versioned.UpdateStruct(m.ctx, cnt, m.tbl, wp.Interface(), versioned.Set(m.ncol, "wrong"))
		} else {
			err = versioned.DeleteStruct(m.ctx, cnt, m.tbl, wp.Interface())
		}
		check = func(err error) bool {
			var ke *versioned.KeyError
			return errors.As(err, &ke) && errors.Is(err, versioned.ErrNoKey) && ke.Column == w.column
		}
	case 2: // a zero key value
		z := reflect.New(m.typ)
		z.Elem().Set(p.Elem())
		c := rapid.SampledFrom(m.cols).Draw(rt, "zeroKey")
		z.Elem().Field(m.keyIdx[c]).SetInt(0)
		err = versioned.UpdateStruct(m.ctx, cnt, m.tbl, z.Interface(), versioned.Set(m.ncol, "zero"))
		check = func(err error) bool {
			var ke *versioned.KeyError
			return errors.As(err, &ke) && errors.Is(err, versioned.ErrNoKey) && ke.Column == c
		}
	case 3: // the struct itself, not a pointer
		err = versioned.DeleteStruct(m.ctx, cnt, m.tbl, p.Elem().Interface())
		check = func(err error) bool {
			var ie *versioned.InputError
			return errors.As(err, &ie) && errors.Is(err, versioned.ErrInvalidArg)
		}
	case 4: // an assignment to the version column
		err = versioned.UpdateStruct(m.ctx, cnt, m.tbl, p.Interface(), versioned.Set(m.vcol, 1000))
		check = func(err error) bool {
			var ie *versioned.InputError
			return errors.As(err, &ie) && errors.Is(err, versioned.ErrInvalidArg)
		}
	}
	if !check(err) {
		rt.Fatalf("refusal: got %T %v", err, err)
	}
	if n := cnt.execs.Load() + cnt.queries.Load(); n != 0 {
		rt.Fatalf("a refused write sent %d statements", n)
	}
	if got := versionOf(rt, p); got != before {
		rt.Fatalf("a refused write changed the struct's version %d → %d", before, got)
	}
}

// check compares the whole table with the model, and every row's version
// with the highest seen so far.
func (m *structModel) check(rt *rapid.T) {
	cols := make([]string, 0, len(m.cols)+2)
	for _, c := range m.cols {
		cols = append(cols, m.q(c))
	}
	cols = append(cols, m.q(m.ncol), m.q(m.vcol))
	rows, err := m.env.db.Query(fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), m.q(m.table)))
	if err != nil {
		rt.Fatalf("snapshot: %v", err)
	}
	defer rows.Close()
	got := map[string]modelRow{}
	for rows.Next() {
		key := make([]int64, len(m.cols))
		dest := make([]any, 0, len(key)+2)
		for i := range key {
			dest = append(dest, &key[i])
		}
		var row modelRow
		dest = append(dest, &row.note, &row.version)
		if err := rows.Scan(dest...); err != nil {
			rt.Fatalf("scan: %v", err)
		}
		row.present = true
		got[fmt.Sprint(key)] = row
	}
	if err := rows.Err(); err != nil {
		rt.Fatalf("snapshot: %v", err)
	}
	modeltest.Compare(rt, got, m.keys, m.rows, func(r modelRow) bool { return r.present }, func(r modelRow) int64 { return r.version }, m.seen)
}
