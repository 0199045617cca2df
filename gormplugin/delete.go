package gormplugin

import (
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

func (p *Plugin) beforeDelete(db *gorm.DB) {
	m := p.unbuiltModel(db)
	if m == nil {
		return
	}
	stmt := db.Statement
	g := &guard{m: m, op: "delete", soft: m.soft && !stmt.Unscoped}
	if !p.plan(db, g, g.soft) {
		return
	}
	if g.soft {
		// GORM's soft delete replaces the SET clause's expression with
		// its own (deleted_at = now) and builds the UPDATE at once; the
		// bump rides along as the clause's trailing expression.
		if _, ok := stmt.Clauses["SET"]; !ok {
			tail := m.tail
			if g.nullBump {
				tail = m.tailNull
			}
			if g.token > 0 {
				tail.SQL += ",? = ?"
				tail.Vars = append(tail.Vars[:len(tail.Vars):len(tail.Vars)], m.fcol, g.token)
			}
			stmt.Clauses["SET"] = clause.Clause{Name: "SET", AfterExpression: tail}
			g.setTail = true
		}
		// GORM sets deleted_at in memory (in the Dest) before the
		// statement runs; keep the old value to put back if the delete
		// does not hold.
		if g.check && m.softF != nil {
			if fv := m.softF.ReflectValueOf(stmt.Context, g.rv); fv.CanSet() {
				g.softWas = reflect.New(fv.Type()).Elem()
				g.softWas.Set(fv)
			}
		}
	}
	if stmt.ReflectValue.Kind() == reflect.Struct {
		groupConditions(stmt)
	}
	if g.guarded() {
		addWhere(stmt, g)
	}
	stmt.Clauses[stateKey] = clause.Clause{Expression: g}
}

func (p *Plugin) afterDelete(db *gorm.DB) {
	stmt := db.Statement
	g := stateOf[*guard](stmt)
	if g == nil {
		return
	}
	if g.setTail {
		delete(stmt.Clauses, "SET")
	}
	if g.guarded() {
		removeWhere(stmt, g)
	}
	if g.check && db.Error == nil && !db.DryRun {
		p.verify(db, g, g.soft && g.setTail)
	}
	if g.wrote && g.other && g.softWas.IsValid() {
		// GORM gave the Dest the new deleted_at; the row is the Model's.
		f := g.m.softF
		f.ReflectValueOf(stmt.Context, g.rv).Set(f.ReflectValueOf(stmt.Context, stmt.ReflectValue))
	}
}
