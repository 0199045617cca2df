package gormplugin

import (
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"
)

func (p *Plugin) beforeUpdate(db *gorm.DB) {
	m := p.unbuiltModel(db)
	if m == nil {
		return
	}
	stmt := db.Statement
	g := &guard{m: m, op: "update"}
	if !p.plan(db, g, true) {
		return
	}
	ctx := stmt.Context
	rv := stmt.ReflectValue
	if rv.Kind() == reflect.Struct {
		groupConditions(stmt)
	}

	var set clause.Set
	if c, ok := stmt.Clauses["SET"]; ok {
		// A SET the caller added with Clauses: GORM will not convert the
		// update nor add the primary key, so the guard does both.
		user := c
		g.userSet = &user
		us, _ := c.Expression.(clause.Set)
		set = make(clause.Set, 0, len(us)+1)
		set = append(set, us...)
		g.keyWhere = g.check
	} else {
		var was, fenceWas int64
		fenced := rv.Kind() == reflect.Struct && g.token > 0
		if rv.Kind() == reflect.Struct {
			was, _ = m.get(ctx, rv)
		}
		if fenced {
			fenceWas, _ = m.fenceN.Load(m.fence.ReflectValueOf(ctx, rv))
		}
		set = callbacks.ConvertToAssignments(stmt)
		if rv.Kind() == reflect.Struct {
			// ConvertToAssignments writes the update's values into the
			// model, a version (or a fence) among them: undo that.
			m.set(ctx, rv, was)
		}
		if fenced {
			m.setFence(ctx, rv, fenceWas)
		}
		if db.Error != nil {
			return
		}
	}
	// Strip every assignment to the version column: the caller's value is
	// ignored, the bump is the only write to it.
	// The same for the fence of a fenced write: the token is its value.
	out := set[:0]
	for _, a := range set {
		if a.Column.Name != m.column && (g.token == 0 || a.Column.Name != m.fence.DBName) {
			out = append(out, a)
		}
	}
	g.set = out
	stmt.Clauses["SET"] = clause.Clause{Name: "SET", Expression: (*setExpr)(g)}
	if g.guarded() {
		addWhere(stmt, g)
	}
	stmt.Clauses[stateKey] = clause.Clause{Expression: g}
}

func (p *Plugin) afterUpdate(db *gorm.DB) {
	stmt := db.Statement
	g := stateOf[*guard](stmt)
	if g == nil {
		return
	}
	if g.userSet != nil {
		stmt.Clauses["SET"] = *g.userSet
	} else {
		delete(stmt.Clauses, "SET")
	}
	if g.guarded() {
		removeWhere(stmt, g)
	}
	if g.check && db.Error == nil && !db.DryRun {
		p.verify(db, g, true)
	}
}
