package gormplugin

import (
	"context"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// stateKey names the statement clause where the before-callbacks leave
// their guard for the after-callbacks. It is never built into SQL.
const stateKey = "sqlock:version"

// guard is one statement's versioning: the WHERE predicate it builds (as
// *guard), the SET it builds for updates (as *setExpr), and the state the
// after-callbacks need. One allocation per statement.
type guard struct {
	m        *model
	rv       reflect.Value // the struct whose key and version the write checks
	expected int64
	op       string // "update" or "delete", as versioned.StaleError.Op
	check    bool   // compare with expected; false: bump only (batch, opt-out)
	orNull   bool   // expected 0 under NullAsZero: (version = 0 OR version IS NULL)
	nullBump bool   // bump with COALESCE(version, 0) + 1
	keyWhere bool   // the predicate names rv's primary key too (GORM's WHERE does not)
	soft     bool   // a soft delete, which bumps the version
	setTail  bool   // the guard put a SET clause in place (soft delete)
	wrote    bool   // the statement changed the checked row
	bumped   bool   // rv holds the new version
	set      clause.Set
	userSet  *clause.Clause
	softWas  reflect.Value // a copy of rv's soft-delete field, restored when a soft delete does not hold
	other    bool          // rv is not the statement's ReflectValue (see subject)
	token    int64         // the fencing token of a fenced write (0: unfenced)
	fenced   bool          // rv's fence field holds the token
	fenceWas int64         // rv's fence before, restored when the write does not hold
}

// Build writes the version predicate (after the primary key when the
// guard names it), then the fence's (a fenced write: COALESCE(fence, 0) <=
// token, a NULL fence counting as never fenced).
func (g *guard) Build(b clause.Builder) {
	if g.keyWhere {
		ctx := context.Background()
		if st, ok := b.(*gorm.Statement); ok {
			ctx = st.Context
		}
		for _, f := range g.m.pks {
			v, _ := f.ValueOf(ctx, g.rv)
			b.WriteQuoted(clause.Column{Table: clause.CurrentTable, Name: f.DBName})
			b.WriteString(" = ")
			b.AddVar(b, v)
			b.WriteString(" AND ")
		}
	}
	if g.check {
		if g.orNull {
			b.WriteByte('(')
		}
		b.WriteQuoted(g.m.qcol)
		b.WriteString(" = ")
		b.AddVar(b, g.expected)
		if g.orNull {
			b.WriteString(" OR ")
			b.WriteQuoted(g.m.qcol)
			b.WriteString(" IS NULL)")
		}
		if g.token > 0 {
			b.WriteString(" AND ")
		}
	}
	if g.token > 0 {
		b.WriteString("COALESCE(")
		b.WriteQuoted(g.m.qfcol)
		b.WriteString(", 0) <= ")
		b.AddVar(b, g.token)
	}
}

// guarded reports whether the guard adds a predicate to the WHERE.
func (g *guard) guarded() bool { return g.check || g.token > 0 }

// setExpr is the SET clause of a versioned update: the caller's
// assignments, then the bump.
type setExpr guard

func (s *setExpr) Build(b clause.Builder) {
	if len(s.set) > 0 {
		s.set.Build(b)
		b.WriteByte(',')
	}
	b.WriteQuoted(s.m.col)
	b.WriteByte('=')
	if s.nullBump {
		b.WriteString("COALESCE(")
		b.WriteQuoted(s.m.col)
		b.WriteString(", 0) + 1")
	} else {
		b.WriteQuoted(s.m.col)
		b.WriteString(" + 1")
	}
	if s.token > 0 {
		b.WriteByte(',')
		b.WriteQuoted(s.m.fcol)
		b.WriteByte('=')
		b.AddVar(b, s.token)
	}
}

// stateOf returns the state a before-callback left on the statement for
// its after-callback (a *guard for updates and deletes, a *createState for
// creates), or nil.
func stateOf[T clause.Expression](stmt *gorm.Statement) T {
	st, _ := stmt.Clauses[stateKey].Expression.(T)
	return st
}

// group is the caller's WHERE conditions, always built inside one pair of
// parentheses, with GORM's own rules for joining them.
type group []clause.Expression

func (g group) Build(b clause.Builder) {
	b.WriteByte('(')
	clause.Where{Exprs: g}.Build(b)
	b.WriteByte(')')
}

// groupConditions puts the statement's existing WHERE conditions into one
// parenthesised group. It runs before the primary key and the version are
// appended, so that both bind the whole statement whatever the caller's
// conditions hold: GORM's own parenthesising depends on the shape of each
// condition (a lone Or(), an "a OR b" string inside clause.And, …) and can
// leave an OR that would join the key or the version as "… OR x AND id = ?".
func groupConditions(stmt *gorm.Statement) {
	c, ok := stmt.Clauses["WHERE"]
	if !ok {
		return
	}
	w, ok := c.Expression.(clause.Where)
	if !ok || len(w.Exprs) == 0 {
		return
	}
	if len(w.Exprs) == 1 {
		if _, ok := w.Exprs[0].(group); ok {
			return
		}
	}
	// A copy: clause.Where.Build reorders its slice in place.
	c.Expression = clause.Where{Exprs: []clause.Expression{group(append([]clause.Expression(nil), w.Exprs...))}}
	stmt.Clauses["WHERE"] = c
}

// addWhere appends the guard to the statement's WHERE.
func addWhere(stmt *gorm.Statement, g *guard) {
	c := stmt.Clauses["WHERE"]
	var exprs []clause.Expression
	if w, ok := c.Expression.(clause.Where); ok {
		exprs = w.Exprs
	}
	exprs = append(exprs[:len(exprs):len(exprs)], g)
	c.Name = "WHERE"
	c.Expression = clause.Where{Exprs: exprs}
	stmt.Clauses["WHERE"] = c
}

// removeWhere takes the guard out of the statement's WHERE again, so that
// a chain reused for another write (tx := db.Model(&o); tx.Update(…);
// tx.Update(…)) is checked by the version the struct has then, not by
// this one as well.
func removeWhere(stmt *gorm.Statement, g *guard) {
	c, ok := stmt.Clauses["WHERE"]
	if !ok {
		return
	}
	w, _ := c.Expression.(clause.Where)
	for i, e := range w.Exprs {
		if e != clause.Expression(g) {
			continue
		}
		if i == len(w.Exprs)-1 {
			w.Exprs = w.Exprs[:i] // a shorter view of the same array: nothing is overwritten
		} else {
			w.Exprs = append(append(make([]clause.Expression, 0, len(w.Exprs)-1), w.Exprs[:i]...), w.Exprs[i+1:]...)
		}
		c.Expression = w
		stmt.Clauses["WHERE"] = c
		return
	}
}
