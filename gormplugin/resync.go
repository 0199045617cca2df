package gormplugin

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/versioned"
)

// Resync reads the version (and, for a soft-deletable model, the
// soft-delete field) of value's row by its primary key, ignoring soft
// delete, into value, leaving its other fields alone. It puts a struct
// back in step after a rollback the plugin cannot see: a caller's own
// db.Transaction whose fn failed after a successful versioned write of
// value leaves value at the rolled-back version.
//
// value must be a non-nil pointer to a struct of a versioned model with
// its primary key set; otherwise Resync fails before anything is sent, with
// an error matching [sqlock.ErrNilHandle] (a nil db), versioned.ErrInvalidArg,
// *versioned.TagError (versioned.ErrInvalidModel) or versioned.ErrNoKey. A row that is gone is
// gorm.ErrRecordNotFound. A NULL version reads as 0.
func Resync(db *gorm.DB, value any) error {
	if db == nil {
		return errkind.New(sqlock.ErrNilHandle, "gormplugin: resync: nil *gorm.DB")
	}
	rv := reflect.ValueOf(value)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("gormplugin: resync: %T is not a non-nil pointer to a struct: %w", value, versioned.ErrInvalidArg)
	}
	stmt := &gorm.Statement{DB: db}
	if err := stmt.Parse(value); err != nil {
		return err
	}
	m := parseModel(stmt.Schema)
	if p, ok := db.Config.Plugins[Name].(*Plugin); ok {
		m = p.model(stmt.Schema)
	}
	switch {
	case m.err != nil:
		return m.err
	case m.ver == nil:
		return &versioned.TagError{Type: stmt.Schema.ModelType, Reason: `no field tagged lock:"version": Resync has no version to read back`}
	}
	ctx := db.Statement.Context
	rv = rv.Elem()
	if missing, col := m.keyMissing(ctx, rv); missing {
		return &versioned.KeyError{Table: stmt.Table, Column: col, Reason: "Resync reads the row by its primary key"}
	}
	cols := []string{m.column}
	if m.softF != nil {
		cols = append(cols, m.softF.DBName)
	}
	conds := make([]clause.Expression, len(m.pks))
	for i, f := range m.pks {
		v, _ := f.ValueOf(ctx, rv)
		conds[i] = clause.Eq{Column: clause.Column{Table: clause.CurrentTable, Name: f.DBName}, Value: v}
	}
	fresh := reflect.New(rv.Type())
	err := db.Session(&gorm.Session{NewDB: true, SkipHooks: true, Context: ctx}).Unscoped().
		Table(stmt.Table).Select(cols).Where(clause.Where{Exprs: conds}).Take(fresh.Interface()).Error
	if err != nil {
		return err
	}
	m.ver.ReflectValueOf(ctx, rv).Set(m.ver.ReflectValueOf(ctx, fresh.Elem()))
	if m.softF != nil {
		m.softF.ReflectValueOf(ctx, rv).Set(m.softF.ReflectValueOf(ctx, fresh.Elem()))
	}
	return nil
}
