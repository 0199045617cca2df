package gormplugin

import (
	"reflect"
	"strconv"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/versioned"
)

// versionedModel returns the statement's model info, or nil when the
// statement is not a versioned write (or has already failed).
func (p *Plugin) versionedModel(db *gorm.DB) *model {
	stmt := db.Statement
	if db.Error != nil || stmt.Schema == nil {
		return nil
	}
	m := p.model(stmt.Schema)
	if m.ver == nil {
		return nil
	}
	if m.err != nil {
		db.AddError(m.err)
		return nil
	}
	return m
}

// unbuiltModel is versionedModel for an update or delete whose SQL GORM
// is still to build: a statement that carries its own SQL is not
// versioned.
func (p *Plugin) unbuiltModel(db *gorm.DB) *model {
	if db.Statement.SQL.Len() != 0 {
		return nil
	}
	return p.versionedModel(db)
}

// subject returns the struct a single-statement write is about and
// whether the guard must name its key (GORM's WHERE does not). It is the
// statement's ReflectValue, except where GORM writes one struct's values
// under another's key:
//
//   - an update of a batch model (no key, no version) whose values are a
//     struct of the same model with a version, Model(&T{}).Updates(&loaded):
//     the loaded struct is checked by its own key and version;
//   - a delete whose Dest carries neither key nor version under a keyed
//     Model, Model(&loaded).Delete(&T{}): GORM deletes by the Model's key,
//     so the Model's version is checked.
func (g *guard) subject(stmt *gorm.Statement) (rv reflect.Value, other, keyWhere bool) {
	rv = stmt.ReflectValue
	if rv.Kind() != reflect.Struct || stmt.Model == nil || stmt.Dest == nil || same(stmt.Dest, stmt.Model) {
		return rv, false, false
	}
	ctx := stmt.Context
	if !g.m.blank(ctx, rv) {
		return rv, false, false
	}
	o := stmt.Dest
	if g.op == "delete" {
		if !rv.CanAddr() { // GORM uses the Model's key only for an addressable Dest
			return rv, false, false
		}
		o = stmt.Model
	}
	ov := reflect.Indirect(reflect.ValueOf(o))
	if ov.Kind() != reflect.Struct || ov.Type() != stmt.Schema.ModelType {
		return rv, false, false
	}
	if g.op == "delete" {
		if g.m.blank(ctx, ov) {
			return rv, false, false
		}
		return ov, true, false
	}
	if v, _ := g.m.get(ctx, ov); v == 0 {
		return rv, false, false // a struct of plain values: a batch write
	}
	return ov, true, true
}

// same reports whether a and b are one value: the same pointer, or copies
// GORM made of one value (Model = Dest), which may not be comparable with
// == (a struct holding a slice).
func same(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Type() != vb.Type() {
		return false
	}
	if !va.Comparable() || !vb.Comparable() {
		return true
	}
	return va.Equal(vb)
}

// plan decides how a single statement is versioned: checked against the
// subject struct's version, or bumped only. It reports false after adding
// an error.
func (p *Plugin) plan(db *gorm.DB, g *guard, bumps bool) bool {
	stmt := db.Statement
	ctx := stmt.Context
	rv, other, keyWhere := g.subject(stmt)
	g.rv, g.other = rv, other
	skip := skipped(db)
	switch rv.Kind() {
	case reflect.Struct:
		exp, err := g.m.get(ctx, rv)
		if err != nil {
			db.AddError(err)
			return false
		}
		g.expected = exp
		missing, col := g.m.keyMissing(ctx, rv)
		switch {
		case skip:
		case missing && exp == 0:
			// No key and no version: Model(&T{}).Where(…), a batch write.
			if g.op == "update" && associationWrite(stmt) {
				db.AddError(&UnsupportedError{Table: stmt.Table, Op: g.op,
					Reason: "Association(…).Delete writes this table's rows by key without their versions " +
						"(and cannot bump the structs that hold them); clear the foreign key through the " +
						"struct instead — Model(&row).Update(\"<fk>\", nil), or Association(…).Clear() from a belongs-to owner"})
				return false
			}
		case missing:
			db.AddError(&versioned.KeyError{Table: stmt.Table, Column: col,
				Reason: "a versioned " + g.op + " of one row needs its primary key; " +
					"use Model(&T{}).Where(…) for a batch write"})
			return false
		default:
			if bumps {
				if _, err := g.m.next(exp); err != nil {
					db.AddError(err)
					return false
				}
			}
			g.check = true
			g.keyWhere = keyWhere
			g.orNull = exp == 0 && p.cfg.null == NullAsZero
		}
	case reflect.Slice, reflect.Array:
		if rv.Len() > 0 && !skip {
			db.AddError(&UnsupportedError{Table: stmt.Table, Op: g.op,
				Reason: "a slice of versioned rows: write them one at a time (in a transaction), " +
					"or use Model(&T{}).Where(…) for an unchecked batch write"})
			return false
		}
	}
	// Under NullAsZero the bump turns a NULL into 1 for unchecked writes
	// and for writes expecting 0.
	g.nullBump = p.cfg.null == NullAsZero && (!g.check || g.expected == 0)
	if g.m.fence != nil && !skip {
		tok, err := p.fenceToken(stmt, g)
		if err != nil {
			db.AddError(err)
			return false
		}
		g.token = tok
	}
	return true
}

// fenceToken returns the fencing token of a write of a fenced model, from
// the statement's context: a missing token, one that is not positive and
// one the fence field cannot hold are refused before anything is sent.
func (p *Plugin) fenceToken(stmt *gorm.Statement, g *guard) (int64, error) {
	tok, ok := sqlock.FencingToken(stmt.Context)
	n := g.m.fenceN
	switch {
	case !ok:
		return 0, &versioned.InputError{Op: g.op, Arg: "fence", Kind: versioned.ErrInvalidArg,
			Reason: "no fencing token in the context: " + stmt.Schema.Name + ` has a lock:"fence" field, so it is written only under a lock ` +
				`(db.WithContext(sqlock.WithFencingToken(ctx, token)), or SkipVersionCheck for a deliberate blind write)`}
	case tok <= 0:
		return 0, &versioned.InputError{Op: g.op, Arg: "fence", Kind: versioned.ErrInvalidArg,
			Reason: "token " + strconv.FormatInt(tok, 10) + ": a fencing token is positive"}
	case tok > n.Max:
		return 0, &versioned.OverflowError{Type: n.Type.String(), Value: strconv.FormatInt(tok, 10), Min: n.Min, Max: n.Max}
	}
	return tok, nil
}

// associationWrite reports whether a batch update has the shape of the
// statement GORM's Association(…).Delete builds inside: UpdateColumns of
// NULL foreign keys on a fresh model, limited by an IN on the table's own
// primary key that GORM qualified with the table's name. No chain a user
// writes with Where produces that IN.
func associationWrite(stmt *gorm.Statement) bool {
	if !stmt.SkipHooks {
		return false
	}
	attrs, ok := stmt.Dest.(map[string]any)
	if !ok || len(attrs) == 0 {
		return false
	}
	for _, v := range attrs {
		if v != nil {
			return false
		}
	}
	w, _ := stmt.Clauses["WHERE"].Expression.(clause.Where)
	return ownKeyIN(stmt, w.Exprs)
}

// ownKeyIN reports whether exprs (or an AND of them, as GORM's Clauses
// wraps several) hold an IN on the primary key qualified with the table's
// own name.
func ownKeyIN(stmt *gorm.Statement, exprs []clause.Expression) bool {
	pks := stmt.Schema.PrimaryFieldDBNames
	for _, e := range exprs {
		switch e := e.(type) {
		case clause.AndConditions:
			if ownKeyIN(stmt, e.Exprs) {
				return true
			}
		case clause.IN:
			switch c := e.Column.(type) {
			case clause.Column:
				if len(pks) == 1 && c.Table == stmt.Schema.Table && c.Name == pks[0] {
					return true
				}
			case []clause.Column:
				if len(pks) > 1 && len(c) == len(pks) && c[0].Table == stmt.Schema.Table && c[0].Name == pks[0] {
					return true
				}
			}
		}
	}
	return false
}
