package sqlxhelpers

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx/reflectx"
	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/versioned"
)

// column is a struct field and the column it maps to.
type column struct {
	name  string
	index []int
}

// typeInfo is what a Helper knows about a struct type, computed once per type
// (and per Helper, since the Helper's mapper names the columns).
type typeInfo struct {
	t            reflect.Type
	model        *vmodel.Model
	version      column
	versionParam string   // the named parameter that carries the version
	keys         []column // in the model's key order
	fence        *column  // the lock:"fence" field, nil when the struct has none
	cols         []column // the columns Update writes by default, in declaration order
	noKey        string   // why an untagged id field is not the key, for the error
	err          error
}

var (
	valuerType  = reflect.TypeFor[driver.Valuer]()
	scannerType = reflect.TypeFor[sql.Scanner]()
)

func (s *state) typeInfo(t reflect.Type) (*typeInfo, error) {
	if v, ok := s.types.Load(t); ok {
		ti := v.(*typeInfo)
		return ti, ti.err
	}
	ti := buildTypeInfo(t, s.cfg.mapper)
	v, _ := s.types.LoadOrStore(t, ti)
	ti = v.(*typeInfo)
	return ti, ti.err
}

// buildTypeInfo reads the lock tags through the shared struct model (the version
// field, the key fields) and the column names through the sqlx mapper: a
// field's column is its lock tag's column=NAME when given, else the name sqlx
// maps it to (its db tag, or the mapper's name for the Go field).
func buildTypeInfo(t reflect.Type, m *reflectx.Mapper) *typeInfo {
	ti := &typeInfo{t: t}
	model, err := vmodel.Of(t)
	if err != nil {
		ti.err = err
		return ti
	}
	ti.model = model
	sm := m.TypeMap(t)
	byIndex := func(index []int) *reflectx.FieldInfo {
		for _, fi := range sm.Index {
			if slices.Equal(fi.Index, index) {
				return fi
			}
		}
		return nil
	}
	colFor := func(index []int, hint string) (string, *reflectx.FieldInfo) {
		sf := t.FieldByIndex(index)
		if tag, err := vmodel.ParseTag(sf.Tag.Get(vmodel.TagName)); err == nil && tag.Column != "" {
			return tag.Column, byIndex(index)
		}
		fi := byIndex(index)
		if fi != nil && fi.Path != "" && !strings.Contains(fi.Path, ".") {
			return fi.Path, fi
		}
		return hint, fi
	}
	vcol, vfi := colFor(model.Version.Index, model.Version.Column)
	ti.version = column{name: vcol, index: model.Version.Index}
	ti.versionParam = "sqlock_version"
	if vfi != nil && validParamName(vfi.Path) {
		ti.versionParam = vfi.Path
	}
	taken := map[string]bool{vcol: true}
	for _, k := range model.Keys {
		name, _ := colFor(k.Index, k.Column)
		ti.keys = append(ti.keys, column{name: name, index: k.Index})
		taken[name] = true
	}
	if f := model.Fence; f != nil {
		name, _ := colFor(f.Index, f.Column)
		if taken[name] {
			ti.err = &versioned.TagError{Type: t, Field: f.Name, Tag: t.FieldByIndex(f.Index).Tag.Get(vmodel.TagName),
				Reason: "the fence maps to column " + strconv.Quote(name) + ", the version's or a key's"}
			return ti
		}
		ti.fence = &column{name: name, index: f.Index}
		taken[name] = true
	}
	if len(ti.keys) == 1 && ti.keys[0].name != "id" && !hasLockTag(t, model.Keys[0].Index) {
		// versioned picked the untagged field whose default column is id,
		// but the mapper maps it to another column: that column says
		// nothing about being a key, so the write is refused rather than
		// aimed at rows by it.
		ti.noKey = " (" + model.Keys[0].Name + " maps to column " + strconv.Quote(ti.keys[0].name) + ", not id)"
		ti.keys = nil
	}
	// Default columns: every field sqlx maps to a top-level name, that is a
	// value (not a struct whose own fields are mapped), except the version
	// and key columns.
	for _, fi := range sm.Index {
		if fi.Embedded || fi.Name == "" || strings.Contains(fi.Path, ".") || sm.Names[fi.Path] != fi {
			continue
		}
		if slices.Equal(fi.Index, model.Version.Index) || isKeyIndex(model, fi.Index) ||
			(model.Fence != nil && slices.Equal(fi.Index, model.Fence.Index)) {
			continue
		}
		if hasMappedChildren(fi) && !isValue(fi.Field.Type) {
			continue
		}
		name, _ := colFor(fi.Index, fi.Path)
		if taken[name] {
			continue
		}
		taken[name] = true
		ti.cols = append(ti.cols, column{name: name, index: fi.Index})
	}
	slices.SortStableFunc(ti.cols, func(a, b column) int { return slices.Compare(a.index, b.index) })
	return ti
}

// hasLockTag reports whether the field at index of t has a lock tag.
func hasLockTag(t reflect.Type, index []int) bool {
	_, ok := t.FieldByIndex(index).Tag.Lookup(vmodel.TagName)
	return ok
}

func isKeyIndex(m *vmodel.Model, index []int) bool {
	for _, k := range m.Keys {
		if slices.Equal(k.Index, index) {
			return true
		}
	}
	return false
}

func hasMappedChildren(fi *reflectx.FieldInfo) bool {
	for _, c := range fi.Children {
		if c != nil {
			return true
		}
	}
	return false
}

// isValue reports whether a struct-typed field is bound as one value (it is
// a driver.Valuer or a sql.Scanner).
func isValue(t reflect.Type) bool {
	return t.Implements(valuerType) || reflect.PointerTo(t).Implements(valuerType) ||
		reflect.PointerTo(t).Implements(scannerType)
}

// key returns the struct's key value (a versioned.CompositeKey for several
// columns), refusing a missing one with *versioned.KeyError.
func (ti *typeInfo) key(table string, rv reflect.Value) (any, error) {
	if len(ti.keys) == 0 {
		return nil, &versioned.KeyError{Table: table,
			Reason: "no key field in " + ti.t.String() + `: tag the key field(s) lock:"key", or have one field the mapper maps to column id` + ti.noKey}
	}
	one, many, err := ti.model.KeyOf(rv)
	if err != nil {
		if ke, ok := err.(*versioned.KeyError); ok {
			c := *ke
			c.Table = table
			return nil, &c
		}
		return nil, err
	}
	if many != nil {
		return versioned.CompositeKey(many), nil
	}
	return one, nil
}

// expected returns the version held by the struct rv points to: the
// write's expected version. For an update it fails with
// *versioned.OverflowError when the version cannot be incremented within
// the field's type.
func (ti *typeInfo) expected(rv reflect.Value, op string) (int64, error) {
	exp, err := ti.model.Version.Get(rv)
	if err != nil || op != "update" {
		return exp, err
	}
	_, err = ti.model.Version.Next(exp)
	return exp, err
}

// token returns the fencing token of a write of ti's struct: the context's
// when the struct has a lock:"fence" field (refusing a missing token, one
// that is not positive or one the field cannot hold), 0 otherwise.
func (ti *typeInfo) token(ctx context.Context, op string) (int64, error) {
	if ti.fence == nil {
		return 0, nil
	}
	tok, ok := sqlock.FencingToken(ctx)
	switch {
	case !ok:
		return 0, &versioned.InputError{Op: op, Arg: "fence", Kind: versioned.ErrInvalidArg,
			Reason: "no fencing token in the context: " + ti.t.String() + ` has a lock:"fence" field, so it is written only under a lock (ctx = sqlock.WithFencingToken(ctx, token))`}
	case tok <= 0:
		return 0, &versioned.InputError{Op: op, Arg: "fence", Kind: versioned.ErrInvalidArg,
			Reason: "token " + strconv.FormatInt(tok, 10) + ": a fencing token is positive"}
	case tok > ti.model.Fence.Max:
		return 0, &versioned.OverflowError{Type: ti.model.Fence.Type.String(), Value: strconv.FormatInt(tok, 10), Min: ti.model.Fence.Min, Max: ti.model.Fence.Max}
	}
	return tok, nil
}

// setVersion stores n (within range: expected checked n-1 for an update).
func (ti *typeInfo) setVersion(rv reflect.Value, n int64) error {
	return ti.model.Version.Set(rv, n)
}

func appendKey(args []any, key any) []any {
	if ck, ok := key.(versioned.CompositeKey); ok {
		return append(args, ck...)
	}
	return append(args, key)
}
