package vmodel

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Int is an integer version type: its bounds, and how a version of it is
// read, stored and incremented. GORM's schema finds the field; this says
// what a version in it may be.
type Int struct {
	Type reflect.Type // the field's type (int8, a named type on uint32, …)
	Min  int64        // smallest version the type holds
	Max  int64        // largest version the type holds (capped at math.MaxInt64)
}

// IntOf returns the Int of t, or the reason t cannot be a version type:
// it must be a plain Go integer (a pointer to one would make the version
// nullable, and NULL never equals the expected version).
func IntOf(t reflect.Type) (Int, string) {
	if t.Kind() == reflect.Pointer {
		if _, _, ok := KindBounds(t.Elem().Kind()); ok {
			return Int{}, "nullable versions (" + t.String() + ") are not supported: NULL never equals the expected version; use a plain integer field and a NOT NULL DEFAULT 1 column"
		}
	}
	lo, hi, ok := KindBounds(t.Kind())
	if !ok {
		return Int{}, "the version must be a Go integer type (int, int8 … int64, uint … uint64), not " + t.String()
	}
	return Int{Type: t, Min: lo, Max: hi}, ""
}

// Signed reports whether the type is a signed integer.
func (n Int) Signed() bool { k := n.Type.Kind(); return k >= reflect.Int && k <= reflect.Int64 }

// Next returns cur + 1, or *OverflowError when cur is the type's largest
// value (or outside its range).
func (n Int) Next(cur int64) (int64, error) { return next(cur, n.Min, n.Max, n.Type.String()) }

// Load returns the version held by fv, a value of the type.
func (n Int) Load(fv reflect.Value) (int64, error) {
	if n.Signed() {
		return fv.Int(), nil
	}
	u := fv.Uint()
	if u > math.MaxInt64 {
		return 0, &OverflowError{Type: n.Type.String(), Value: strconv.FormatUint(u, 10), Min: n.Min, Max: n.Max}
	}
	return int64(u), nil
}

// Store stores x in fv, a settable value of the type; a value outside the
// range is *OverflowError and leaves fv unchanged. A value already equal is
// not written again.
func (n Int) Store(fv reflect.Value, x int64) error {
	if x < n.Min || x > n.Max {
		return &OverflowError{Type: n.Type.String(), Value: strconv.FormatInt(x, 10), Min: n.Min, Max: n.Max}
	}
	if n.Signed() {
		if fv.Int() != x {
			fv.SetInt(x)
		}
	} else if fv.Uint() != uint64(x) {
		fv.SetUint(uint64(x))
	}
	return nil
}

// Field is a struct's version field, found and checked once per type.
type Field struct {
	Int
	Name   string // the Go field name
	Index  []int  // for reflect.Value.FieldByIndex from the struct
	Column string // column name hint: lock column=, else db:"…", else SnakeCase(Name)
	DBTag  string // the db tag's name part, "" when absent

	owner reflect.Type
}

// Get returns the version held by v, a struct of the field's type or a
// pointer to one.
func (f *Field) Get(v reflect.Value) (int64, error) {
	fv, err := f.value(v, false)
	if err != nil {
		return 0, err
	}
	return f.Load(fv)
}

// Set stores n in v's version field; v must be a pointer to the struct (or
// an addressable struct). A value outside the field's range is
// *OverflowError and leaves the field unchanged.
func (f *Field) Set(v reflect.Value, n int64) error {
	fv, err := f.value(v, true)
	if err != nil {
		return err
	}
	return f.Store(fv, n)
}

func (f *Field) value(v reflect.Value, set bool) (reflect.Value, error) {
	const op = "version field"
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}, InputErr(op, "value", "nil "+v.Type().String(), ErrInvalidArg)
		}
		v = v.Elem()
	}
	if !v.IsValid() || v.Type() != f.owner {
		return reflect.Value{}, InputErr(op, "value", fmt.Sprintf("%s is not a %s or a pointer to one", typeOf(v), f.owner), ErrInvalidArg)
	}
	var fv reflect.Value
	if len(f.Index) == 1 {
		fv = v.Field(f.Index[0])
	} else {
		fv = v.FieldByIndex(f.Index)
	}
	if set && !fv.CanSet() {
		return reflect.Value{}, InputErr(op, "value", "the struct is not addressable: pass a pointer", ErrInvalidArg)
	}
	return fv, nil
}

func typeOf(v reflect.Value) string {
	if !v.IsValid() {
		return "invalid value"
	}
	return v.Type().String()
}

// KeyField is a struct field that holds (part of) the row's key.
type KeyField struct {
	Name   string
	Index  []int
	Type   reflect.Type
	Column string // column name hint, as for Field
}

// Model is what this package knows about a struct type: its version field,
// its key fields and its fence field. Of computes it once per type.
type Model struct {
	Type    reflect.Type // the struct type
	Version *Field
	// Fence is the field tagged lock:"fence", or nil. A write of a struct
	// with a fence is a fenced write: it needs a fencing token, which the
	// field receives when the write succeeds.
	Fence *Field
	// Keys are the fields tagged lock:"key", in declaration order; when no
	// field is tagged, the one field whose column hint is "id" (ID, Id,
	// db:"id"), if there is one. Empty otherwise: KeyOf then fails with
	// ErrNoKey, and ORMs use their own primary key.
	Keys []*KeyField
	// Columns are the struct's fields by column, for applying a write's
	// assignments to the struct (see Assignment): every exported field
	// reached without an embedded pointer, tagged or not, except db:"-"
	// ones and the embedded structs walked into, named as key fields are
	// (lock column=, else db:"…", else SnakeCase).
	Columns []*KeyField
	// depths[i] is how deeply Columns[i] is embedded: the shallowest field
	// of a column wins, as Go's field promotion does.
	depths []int
}

type modelEntry struct {
	m   *Model
	err error
}

// models caches Of by struct type, verdicts included: a bad type fails
// the same way every time and is parsed once.
var models sync.Map // reflect.Type → modelEntry

// Of returns the model of struct type t (or pointer to struct). It
// fails with *TagError (ErrInvalidModel) when no field is tagged
// lock:"version", and for every misuse (a version that is not a
// Go integer, a pointer such as *int64, two version fields, an unexported
// tagged field, a tag reached through an embedded pointer, a bad tag).
//
// Nullable versions (*int64, sql.NullInt64) are refused: NULL = $n is never
// true and NULL + 1 is NULL, so a NULL version would turn every write into
// a conflict or a silent no-op. Use a NOT NULL column with DEFAULT 1
// and a plain integer field.
func Of(t reflect.Type) (*Model, error) {
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return nil, &TagError{Reason: "nil type"}
	}
	if e, ok := models.Load(t); ok {
		me := e.(modelEntry)
		return me.m, me.err
	}
	m, err := parseModel(t)
	e, _ := models.LoadOrStore(t, modelEntry{m, err})
	me := e.(modelEntry)
	return me.m, me.err
}

// FieldOf returns the version field of struct type t (or pointer to
// struct); see Of for the errors.
func FieldOf(t reflect.Type) (*Field, error) {
	m, err := Of(t)
	if err != nil {
		return nil, err
	}
	return m.Version, nil
}

// VersionOf returns the version held by the struct (or pointer to struct)
// v.
func VersionOf(v any) (int64, error) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return 0, InputErr("version field", "value", "nil", ErrInvalidArg)
	}
	f, err := FieldOf(rv.Type())
	if err != nil {
		return 0, err
	}
	return f.Get(rv)
}

// SetVersion stores n in the version field of the struct ptr points to.
func SetVersion(ptr any, n int64) error {
	rv := reflect.ValueOf(ptr)
	if rv.Kind() != reflect.Pointer {
		return InputErr("version field", "value", fmt.Sprintf("%T is not a pointer to a struct", ptr), ErrInvalidArg)
	}
	f, err := FieldOf(rv.Type())
	if err != nil {
		return err
	}
	return f.Set(rv, n)
}

// KeyColumns returns the key fields' column hints.
func (m *Model) KeyColumns() []string {
	cols := make([]string, len(m.Keys))
	for i, k := range m.Keys {
		cols[i] = k.Column
	}
	return cols
}

// KeyOf returns the key values of v (a struct of m's type or a pointer to
// one), in the order of m.Keys (declaration order): one for one key field
// (many nil, nothing allocated), several in many. A zero or nil key value
// is *KeyError (ErrNoKey): an unsaved struct must never become an UPDATE or
// DELETE without a key.
func (m *Model) KeyOf(v reflect.Value) (one any, many []any, err error) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, nil, InputErr("key", "value", "nil "+v.Type().String(), ErrInvalidArg)
		}
		v = v.Elem()
	}
	if !v.IsValid() || v.Type() != m.Type {
		return nil, nil, InputErr("key", "value", fmt.Sprintf("%s is not a %s or a pointer to one", typeOf(v), m.Type), ErrInvalidArg)
	}
	if len(m.Keys) == 0 {
		return nil, nil, &KeyError{Table: m.Type.String(), Reason: `no key field: tag the key field(s) lock:"key"`}
	}
	if len(m.Keys) == 1 {
		k := m.Keys[0]
		x := v.FieldByIndex(k.Index).Interface()
		if reason := MissingKey(x, false); reason != "" {
			return nil, nil, &KeyError{Table: m.Type.String(), Column: k.Column, Reason: reason}
		}
		return x, nil, nil
	}
	vals := make([]any, len(m.Keys))
	for i, k := range m.Keys {
		x := v.FieldByIndex(k.Index).Interface()
		if reason := MissingKey(x, false); reason != "" {
			return nil, nil, &KeyError{Table: m.Type.String(), Column: k.Column, Reason: reason}
		}
		vals[i] = x
	}
	return nil, vals, nil
}

func parseModel(t reflect.Type) (*Model, error) {
	if t.Kind() != reflect.Struct {
		return nil, &TagError{Type: t, Reason: "not a struct"}
	}
	m := &Model{Type: t}
	var tags Tags
	var idCands []*KeyField
	idDepth := -1
	var walk func(st reflect.Type, index []int, viaPtr string, seen []reflect.Type) error
	walk = func(st reflect.Type, index []int, viaPtr string, seen []reflect.Type) error {
		for i := 0; i < st.NumField(); i++ {
			sf := st.Field(i)
			idx := append(index[:len(index):len(index)], i)
			raw, tagged := sf.Tag.Lookup(TagName)
			if sf.IsExported() && viaPtr == "" && !(sf.Anonymous && !tagged && isStruct(sf.Type)) && !dbIgnored(sf) {
				col := ""
				if tag, err := ParseTag(raw); tagged && err == nil {
					col = tag.Column
				}
				m.Columns = append(m.Columns, keyField(sf, idx, col))
				m.depths = append(m.depths, len(idx))
			}
			if tagged {
				if err := m.addTagged(&tags, t, sf, idx, raw, viaPtr); err != nil {
					return err
				}
			} else if sf.IsExported() && viaPtr == "" && !sf.Anonymous && columnHint(sf, "") == "id" {
				switch d := len(idx); {
				case idDepth == -1 || d < idDepth:
					idDepth, idCands = d, []*KeyField{keyField(sf, idx, "")}
				case d == idDepth:
					idCands = append(idCands, keyField(sf, idx, ""))
				}
			}
			if !sf.Anonymous || tagged {
				continue
			}
			ft, via := sf.Type, viaPtr
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
				if via == "" {
					via = sf.Type.String()
				}
			}
			if ft.Kind() != reflect.Struct || containsType(seen, ft) {
				continue
			}
			if err := walk(ft, idx, via, append(seen, ft)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(t, nil, "", []reflect.Type{t}); err != nil {
		return nil, err
	}
	if len(m.Keys) == 0 && len(idCands) == 1 {
		m.Keys = idCands
	}
	var ver, fence string
	if m.Version != nil {
		ver = m.Version.Column
	}
	if m.Fence != nil {
		fence = m.Fence.Column
	}
	if reason := tags.Done(ver, fence, m.KeyColumns()); reason != "" {
		if f := m.Fence; f != nil {
			return nil, &TagError{Type: t, Field: f.Name, Tag: t.FieldByIndex(f.Index).Tag.Get(TagName), Reason: reason}
		}
		return nil, &TagError{Type: t, Reason: reason}
	}
	return m, nil
}

// isStruct reports a struct or a pointer to one: an embedded field of that
// type is walked into, not mapped to a column of its own.
func isStruct(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct
}

func containsType(ts []reflect.Type, t reflect.Type) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func (m *Model) addTagged(tags *Tags, t reflect.Type, sf reflect.StructField, idx []int, raw, viaPtr string) error {
	bad := func(reason string) error {
		return &TagError{Type: t, Field: sf.Name, Tag: raw, Reason: reason}
	}
	tag, n, reason := tags.Field(sf.Name, raw, sf.Type)
	if reason != "" {
		return bad(reason)
	}
	if !sf.IsExported() {
		return bad("the field is unexported, so it cannot be read or set")
	}
	if viaPtr != "" {
		return bad("the field is reached through the embedded pointer " + viaPtr + ", which may be nil; embed the struct by value")
	}
	if tag.Key {
		m.Keys = append(m.Keys, keyField(sf, idx, tag.Column))
		return nil
	}
	f := &Field{
		Int:    n,
		Name:   sf.Name,
		Index:  idx,
		Column: columnHint(sf, tag.Column),
		DBTag:  dbTag(sf),
		owner:  t,
	}
	if tag.Fence {
		m.Fence = f
	} else {
		m.Version = f
	}
	return nil
}

func keyField(sf reflect.StructField, idx []int, col string) *KeyField {
	return &KeyField{Name: sf.Name, Index: idx, Type: sf.Type, Column: columnHint(sf, col)}
}

// dbIgnored reports db:"-": the field is no column.
func dbIgnored(sf reflect.StructField) bool {
	name, _, _ := strings.Cut(sf.Tag.Get("db"), ",")
	return name == "-"
}

// dbTag returns the name part of a db:"name,…" tag ("" when absent or "-").
func dbTag(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("db"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func columnHint(sf reflect.StructField, explicit string) string {
	if explicit != "" {
		return explicit
	}
	if db := dbTag(sf); db != "" {
		return db
	}
	return SnakeCase(sf.Name)
}

// SnakeCase turns a Go field name into the conventional column name:
// "ID" → "id", "LockVersion" → "lock_version", "UserID" → "user_id",
// "HTTPStatus" → "http_status". It is the default column hint; sqlx users
// override it with db:"…", GORM users get GORM's own naming.
func SnakeCase(name string) string {
	rs := []rune(name)
	var b strings.Builder
	b.Grow(len(name) + 4)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 {
				prev := rs[i-1]
				nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
				if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
					b.WriteByte('_')
				}
			}
			r = unicode.ToLower(r)
		}
		if r < utf8.RuneSelf {
			b.WriteByte(byte(r))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
