package gormplugin

import (
	"context"
	"reflect"

	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/versioned"
)

// model is what the plugin found in one GORM schema, computed once.
type model struct {
	err    error         // a *versioned.TagError, reported on every use
	ver    *schema.Field // nil: the model is not versioned
	column string        // the version column (GORM's DBName)
	n      vmodel.Int    // the version's type: bounds, load, store, next
	pks    []*schema.Field
	soft   bool          // the schema has delete clauses (soft delete)
	fence  *schema.Field // the lock:"fence" field, nil when the model has none
	fenceN vmodel.Int    // the fence's type
	softF  *schema.Field // the field whose type carries them (gorm.DeletedAt …)

	// Built once (and boxed once), written into statements.
	col      any         // clause.Column{Name: version}
	qcol     any         // clause.Column{Table: clause.CurrentTable, Name: version}
	fcol     any         // clause.Column{Name: fence}
	qfcol    any         // clause.Column{Table: clause.CurrentTable, Name: fence}
	tail     clause.Expr // , version = version + 1 (after a soft delete's SET)
	tailNull clause.Expr
}

var unversioned = &model{}

func (p *Plugin) model(s *schema.Schema) *model {
	if v, ok := p.models.Load(s); ok {
		return v.(*model)
	}
	m := parseModel(s)
	v, _ := p.models.LoadOrStore(s, m)
	return v.(*model)
}

func parseModel(s *schema.Schema) *model {
	var m *model
	var fence *schema.Field
	var fenceN vmodel.Int
	var tags vmodel.Tags
	for _, f := range s.Fields {
		raw, ok := f.Tag.Lookup(vmodel.TagName)
		if !ok {
			continue
		}
		bad := func(reason string) *model {
			return &model{ver: f, err: &versioned.TagError{Type: s.ModelType, Field: f.Name, Tag: raw, Reason: reason}}
		}
		tag, n, reason := tags.Field(f.Name, raw, f.FieldType)
		switch {
		case tag.Key && reason == "":
			continue // lock:"key" is for sqlx users; GORM has its own primary key
		case reason != "":
			if tag.Version && !tags.Versioned() && f.FieldType.Kind() == reflect.Pointer { // a nullable version
				reason += " (see NullPolicy for NULLs already in the table)"
			}
			return bad(reason)
		case f.DBName == "":
			return bad("GORM maps this field to no column (gorm:\"-\"?)")
		case tag.Column != "" && tag.Column != f.DBName:
			return bad("lock column=" + tag.Column + " differs from GORM's column " + f.DBName + `: name the column with gorm:"column:…"`)
		}
		for _, i := range f.StructField.Index {
			if i < 0 { // GORM's mark for a step through an embedded pointer
				return bad("the field is reached through an embedded pointer, which may be nil; embed the struct by value")
			}
		}
		if tag.Fence {
			fence, fenceN = f, n
			continue
		}
		m = &model{
			ver:    f,
			column: f.DBName,
			n:      n,
			pks:    s.PrimaryFields,
			soft:   len(s.DeleteClauses) > 0,
		}
	}
	if !tags.Versioned() && !tags.Fenced() {
		return unversioned
	}
	var column, fenceCol string
	if m != nil {
		column = m.column
	}
	if fence != nil {
		fenceCol = fence.DBName
	}
	if reason := tags.Done(column, fenceCol, s.PrimaryFieldDBNames); reason != "" {
		// A fence without a version is refused rather than skipped as an
		// unversioned model, which would write without the fence.
		return &model{ver: fence, err: &versioned.TagError{Type: s.ModelType, Field: fence.Name, Tag: fence.Tag.Get(vmodel.TagName), Reason: reason}}
	}
	if fence != nil {
		m.fence, m.fenceN = fence, fenceN
		m.fcol = clause.Column{Name: fence.DBName}
		m.qfcol = clause.Column{Table: clause.CurrentTable, Name: fence.DBName}
	}
	if m.soft {
		for _, f := range s.Fields {
			if _, ok := reflect.New(f.FieldType).Interface().(schema.DeleteClausesInterface); ok {
				m.softF = f
				break
			}
		}
	}
	col := clause.Column{Name: m.column}
	m.col = col
	m.qcol = clause.Column{Table: clause.CurrentTable, Name: m.column}
	m.tail = clause.Expr{SQL: ",? = ? + 1", Vars: []any{col, col}}
	m.tailNull = clause.Expr{SQL: ",? = COALESCE(?, 0) + 1", Vars: []any{col, col}}
	return m
}

// get reads the version of the struct rv.
func (m *model) get(ctx context.Context, rv reflect.Value) (int64, error) {
	return m.n.Load(m.ver.ReflectValueOf(ctx, rv))
}

// set stores n in the struct rv when it is addressable (and n is in the
// type's range); it reports whether it could.
func (m *model) set(ctx context.Context, rv reflect.Value, n int64) bool {
	fv := m.ver.ReflectValueOf(ctx, rv)
	return fv.CanSet() && m.n.Store(fv, n) == nil
}

// setFence stores tok in rv's fence field when it is addressable; it
// returns the value it replaced and whether it stored.
func (m *model) setFence(ctx context.Context, rv reflect.Value, tok int64) (was int64, ok bool) {
	fv := m.fence.ReflectValueOf(ctx, rv)
	if !fv.CanSet() {
		return 0, false
	}
	was, err := m.fenceN.Load(fv)
	return was, err == nil && m.fenceN.Store(fv, tok) == nil
}

// next returns cur + 1, or *versioned.OverflowError at the type's maximum.
func (m *model) next(cur int64) (int64, error) { return m.n.Next(cur) }

// keyMissing returns the first primary key field whose value in rv is zero,
// or nil when every one is set. A model without a primary key reports its
// absence as a missing key.
func (m *model) keyMissing(ctx context.Context, rv reflect.Value) (missing bool, column string) {
	if len(m.pks) == 0 {
		return true, ""
	}
	for _, f := range m.pks {
		if f.ReflectValueOf(ctx, rv).IsZero() {
			return true, f.DBName
		}
	}
	return false, ""
}

// blank reports whether rv has neither a primary key value nor a version:
// the model of a batch write.
func (m *model) blank(ctx context.Context, rv reflect.Value) bool {
	if missing, _ := m.keyMissing(ctx, rv); !missing {
		return false
	}
	return m.ver.ReflectValueOf(ctx, rv).IsZero()
}

// key returns the primary key value of rv for error messages: the value
// for one key column, a versioned.CompositeKey for several.
func (m *model) key(ctx context.Context, rv reflect.Value) any {
	if len(m.pks) == 1 {
		v, _ := m.pks[0].ValueOf(ctx, rv)
		return v
	}
	k := make(versioned.CompositeKey, len(m.pks))
	for i, f := range m.pks {
		k[i], _ = f.ValueOf(ctx, rv)
	}
	return k
}
