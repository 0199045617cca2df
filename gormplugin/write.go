package gormplugin

import (
	"context"
	"database/sql"
	"errors"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"

	"github.com/sqlock/sqlock/versioned"
)

// stateKey names the statement clause where the before-callbacks leave
// their guard for the after-callbacks. It is never built into SQL.
const stateKey = "sqlock:version"

// guard is one statement's versioning: the WHERE predicate it builds (as
// *guard), the SET it builds for updates (as *setExpr), and the state the
// after-callback needs. One allocation per statement.
type guard struct {
	m        *model
	expected int64
	op       versioned.Op
	check    bool // compare with expected; false: bump only (batch, opt-out)
	orNull   bool // expected 0 under NullAsZero: (version = 0 OR version IS NULL)
	nullBump bool // bump with COALESCE(version, 0) + 1
	soft     bool // a soft delete, which bumps the version
	setTail  bool // the guard put a SET clause in place (soft delete)
	set      clause.Set
	userSet  *clause.Clause
	softWas  reflect.Value // a copy of the soft-delete field, restored when a soft delete fails
}

// Build writes the version predicate.
func (g *guard) Build(b clause.Builder) {
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
}

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
}

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

// plan decides how a single statement on rv is versioned: checked against
// the struct's version, or bumped only. It reports false after adding an
// error.
func (p *Plugin) plan(db *gorm.DB, g *guard, bumps bool) bool {
	stmt := db.Statement
	ctx := stmt.Context
	rv := stmt.ReflectValue
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
		case missing:
			db.AddError(&versioned.KeyError{Table: stmt.Table, Column: col,
				Reason: "a versioned " + g.op.String() + " of one row needs its primary key; " +
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
			g.orNull = exp == 0 && p.cfg.null == NullAsZero
		}
	case reflect.Slice, reflect.Array:
		if rv.Len() > 0 && !skip {
			db.AddError(&UnsupportedError{Table: stmt.Table, Op: g.op.String(),
				Reason: "a slice of versioned rows: write them one at a time (in a transaction), " +
					"or use Model(&T{}).Where(…) for an unchecked batch write"})
			return false
		}
	}
	// Under NullAsZero the bump turns a NULL into 1 for unchecked writes
	// and for writes expecting 0.
	g.nullBump = p.cfg.null == NullAsZero && (!g.check || g.expected == 0)
	return true
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

func (p *Plugin) beforeUpdate(db *gorm.DB) {
	stmt := db.Statement
	if stmt.SQL.Len() != 0 {
		return
	}
	m := p.versionedModel(db)
	if m == nil {
		return
	}
	g := &guard{m: m, op: versioned.OpUpdate}
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
		if g.check {
			for _, f := range m.pks {
				v, _ := f.ValueOf(ctx, rv)
				stmt.AddClause(clause.Where{Exprs: []clause.Expression{clause.Eq{Column: clause.Column{Table: clause.CurrentTable, Name: f.DBName}, Value: v}}})
			}
		}
	} else {
		set = callbacks.ConvertToAssignments(stmt)
		if rv.Kind() == reflect.Struct {
			// ConvertToAssignments writes the update's values into the
			// model, a version among them: undo that.
			m.set(ctx, rv, g.expected)
		}
		if db.Error != nil {
			return
		}
	}
	// Strip every assignment to the version column: the caller's value is
	// ignored, the bump is the only write to it.
	out := set[:0]
	for _, a := range set {
		if a.Column.Name != m.column {
			out = append(out, a)
		}
	}
	g.set = out
	stmt.Clauses["SET"] = clause.Clause{Name: "SET", Expression: (*setExpr)(g)}
	if g.check {
		addWhere(stmt, g)
	}
}

func (p *Plugin) afterUpdate(db *gorm.DB) {
	stmt := db.Statement
	c, ok := stmt.Clauses["SET"]
	if !ok {
		return
	}
	s, ok := c.Expression.(*setExpr)
	if !ok {
		return
	}
	g := (*guard)(s)
	if g.userSet != nil {
		stmt.Clauses["SET"] = *g.userSet
	} else {
		delete(stmt.Clauses, "SET")
	}
	if g.check && db.Error == nil && !db.DryRun {
		p.verify(db, g, true)
	}
}

func (p *Plugin) beforeDelete(db *gorm.DB) {
	stmt := db.Statement
	if stmt.SQL.Len() != 0 {
		return
	}
	m := p.versionedModel(db)
	if m == nil {
		return
	}
	g := &guard{m: m, op: versioned.OpDelete, soft: m.soft && !stmt.Unscoped}
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
			stmt.Clauses["SET"] = clause.Clause{Name: "SET", AfterExpression: tail}
			g.setTail = true
		}
		// GORM sets deleted_at in memory before the statement runs; keep
		// the old value to put back if the delete fails.
		if g.check && m.softF != nil {
			if fv := m.softF.ReflectValueOf(stmt.Context, stmt.ReflectValue); fv.CanSet() {
				g.softWas = reflect.New(fv.Type()).Elem()
				g.softWas.Set(fv)
			}
		}
	}
	if stmt.ReflectValue.Kind() == reflect.Struct {
		groupConditions(stmt)
	}
	if g.check {
		addWhere(stmt, g)
	}
	if g.check || g.setTail {
		stmt.Clauses[stateKey] = clause.Clause{Expression: g}
	}
}

func (p *Plugin) afterDelete(db *gorm.DB) {
	stmt := db.Statement
	c, ok := stmt.Clauses[stateKey]
	if !ok {
		return
	}
	g, _ := c.Expression.(*guard)
	delete(stmt.Clauses, stateKey)
	if g == nil {
		return
	}
	if g.setTail {
		delete(stmt.Clauses, "SET")
	}
	if g.check && db.Error == nil && !db.DryRun {
		p.verify(db, g, g.soft && g.setTail)
	}
	if g.softWas.IsValid() && db.Error != nil {
		g.m.softF.ReflectValueOf(stmt.Context, stmt.ReflectValue).Set(g.softWas)
	}
}

// verify turns the row count of a checked single-row write into its
// outcome: the new version in memory, a stale error, or a key error.
func (p *Plugin) verify(db *gorm.DB, g *guard, bumped bool) {
	stmt := db.Statement
	switch n := db.RowsAffected; {
	case n == 1:
		if bumped {
			g.m.set(stmt.Context, stmt.ReflectValue, g.expected+1)
		}
	case n == 0:
		db.AddError(p.staleError(db, g))
	default:
		db.AddError(&versioned.RowsError{Table: stmt.Table, Key: g.m.key(stmt.Context, stmt.ReflectValue), Rows: n})
	}
}

func (p *Plugin) staleError(db *gorm.DB, g *guard) error {
	stmt := db.Statement
	ctx := stmt.Context
	key := g.m.key(ctx, stmt.ReflectValue)
	se := &versioned.StaleError{Table: stmt.Table, Key: key, Expected: g.expected, Op: g.op}
	if p.cfg.probe || p.cfg.null == NullRefused {
		cur, found, null, err := probe(db, g.m)
		switch {
		case err != nil:
			se.ProbeErr = err
		case !found:
			se.State = versioned.RowGone
		case null && p.cfg.null == NullRefused:
			return &NullVersionError{Table: stmt.Table, Column: g.m.column, Key: key}
		case cur == g.expected:
			se.State, se.Current = versioned.RowUnchanged, cur
		default:
			se.State, se.Current = versioned.RowChanged, cur
		}
	}
	p.stale(ctx, stmt.Table, se)
	return se
}

// probe reads the row's version by primary key, on the statement's own
// connection (inside its transaction), ignoring soft delete.
func probe(db *gorm.DB, m *model) (cur int64, found, null bool, err error) {
	stmt := db.Statement
	ctx := stmt.Context
	conds := make([]clause.Expression, len(m.pks))
	for i, f := range m.pks {
		v, _ := f.ValueOf(ctx, stmt.ReflectValue)
		conds[i] = clause.Eq{Column: clause.Column{Name: f.DBName}, Value: v}
	}
	tx := db.Session(&gorm.Session{NewDB: true, SkipHooks: true, Context: ctx}).
		Table(stmt.Table).
		Clauses(clause.Select{Columns: []clause.Column{{Name: m.column}}}, clause.Where{Exprs: conds}).
		Limit(1)
	row := tx.Row()
	if tx.Error != nil {
		return 0, false, false, tx.Error
	}
	if row == nil {
		return 0, false, false, errors.New("gormplugin: probe returned no row handle")
	}
	var v sql.NullInt64
	switch err := row.Scan(&v); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, false, nil
	case err != nil:
		return 0, false, false, err
	}
	return v.Int64, true, !v.Valid, nil
}

func (p *Plugin) beforeCreate(db *gorm.DB) {
	m := p.versionedModel(db)
	if m == nil {
		return
	}
	stmt := db.Statement
	if c, ok := stmt.Clauses["ON CONFLICT"]; ok && !skipped(db) {
		if oc, ok := c.Expression.(clause.OnConflict); ok && oc.UpdateAll {
			db.AddError(&UnsupportedError{Table: stmt.Table, Op: "create",
				Reason: "an upsert that updates every column would overwrite a newer row without a version check " +
					"(this is what Save of a slice does): update rows one at a time, or opt out with SkipVersionCheck"})
			return
		}
	}
	initVersions(stmt.Context, m, stmt.ReflectValue, stmt.Dest)
}

// initVersions sets a zero version to 1 in every row a create writes.
func initVersions(ctx context.Context, m *model, rv reflect.Value, dest any) {
	switch d := dest.(type) {
	case map[string]any:
		initMap(m, d)
		return
	case *map[string]any:
		if d != nil {
			initMap(m, *d)
		}
		return
	case []map[string]any:
		for _, e := range d {
			initMap(m, e)
		}
		return
	case *[]map[string]any:
		if d != nil {
			for _, e := range *d {
				initMap(m, e)
			}
		}
		return
	}
	switch rv.Kind() {
	case reflect.Struct:
		initStruct(ctx, m, rv)
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			if e := reflect.Indirect(rv.Index(i)); e.Kind() == reflect.Struct {
				initStruct(ctx, m, e)
			}
		}
	}
}

func initStruct(ctx context.Context, m *model, rv reflect.Value) {
	if m.ver.ReflectValueOf(ctx, rv).IsZero() {
		m.set(ctx, rv, 1)
	}
}

func initMap(m *model, row map[string]any) {
	if row == nil {
		return
	}
	if _, ok := row[m.column]; ok {
		return
	}
	if _, ok := row[m.ver.Name]; ok {
		return
	}
	row[m.column] = int64(1)
}
