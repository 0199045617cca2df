package gormplugin

import (
	"context"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// monotonicUpsert versions an ON CONFLICT … DO UPDATE: the version is
// never copied from the inserted row but bumped (UpdateAll, DoUpdates
// naming it), or bumped when the DO UPDATE changes the row (DoUpdates not
// naming it), an upsert of one struct
// (unless opted out) updates only a row at the struct's version, and the
// row's version is returned into the structs (RETURNING).
func (cs *createState) monotonicUpsert(stmt *gorm.Statement, c clause.Clause, check, nullAsZero bool) {
	m := cs.m
	saved := c
	cs.conflict = &saved
	cs.upsert = true
	rv := stmt.ReflectValue
	switch rv.Kind() {
	case reflect.Struct:
		cs.note(stmt.Context, rv)
		cs.checked = check && len(cs.was) == 1
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			if e := reflect.Indirect(rv.Index(i)); e.Kind() == reflect.Struct {
				cs.note(stmt.Context, e)
			}
		}
	default:
		cs.checked = check && rv.Kind() == reflect.Map // one row from a map
	}
	distinct := " IS DISTINCT FROM "
	if stmt.Dialector.Name() == "sqlite" {
		distinct = " IS NOT "
	}
	checked := cs.checked
	// The DO UPDATE of one struct applies only to a row at the struct's
	// version (the one it had before the create made a zero one 1); from
	// a map, at the version the map inserts.
	var where clause.Expression = clause.Expr{SQL: "? = ?", Vars: []any{m.qcol, clause.Column{Table: "excluded", Name: m.column}}}
	if checked && rv.Kind() == reflect.Struct {
		g := &guard{m: m, expected: cs.was[0].ver, check: true}
		g.orNull = g.expected == 0 && nullAsZero
		where = g
	}
	// GORM expands UpdateAll into DoUpdates while it builds the INSERT, after
	// every callback before it: rewrite the assignments as the clause is
	// built.
	c.Builder = func(c clause.Clause, b clause.Builder) {
		if oc, ok := c.Expression.(clause.OnConflict); ok && !oc.DoNothing {
			ups, named := m.withoutVersion(oc.DoUpdates)
			bump := bumpIfChanged{m: m, distinct: distinct}
			if !named && !checked {
				bump.set = ups[:len(ups):len(ups)]
			}
			oc.DoUpdates = append(ups, clause.Assignment{Column: clause.Column{Name: m.column}, Value: bump})
			if checked {
				oc.Where.Exprs = append(oc.Where.Exprs[:len(oc.Where.Exprs):len(oc.Where.Exprs)], where)
			}
			c.Expression = oc
		}
		c.Builder = nil
		c.Build(b)
	}
	stmt.Clauses["ON CONFLICT"] = c

	if k := rv.Kind(); k != reflect.Struct && k != reflect.Slice && k != reflect.Array {
		return // creates from maps have nothing to scan the version into
	}
	ver := clause.Column{Name: m.column}
	if r, ok := stmt.Clauses["RETURNING"]; ok {
		saved := r
		cs.returning = &saved
		stmt.AddClause(clause.Returning{Columns: []clause.Column{ver}})
		return
	}
	// GORM adds RETURNING for the fields the database fills in only when
	// there is none: add those too.
	sel, restricted := stmt.SelectAndOmitColumns(true, false)
	cols := make([]clause.Column, 0, len(stmt.Schema.FieldsWithDefaultDBValue)+1)
	for _, f := range stmt.Schema.FieldsWithDefaultDBValue {
		if v, ok := sel[f.DBName]; (ok && v) || (!ok && (!restricted || f.AutoIncrement)) {
			if f.DBName != m.column {
				cols = append(cols, clause.Column{Name: f.DBName})
			}
		}
	}
	stmt.AddClause(clause.Returning{Columns: append(cols, ver)})
	cs.retAdded = true
}

// note records rv's version before the create.
func (cs *createState) note(ctx context.Context, rv reflect.Value) {
	if v, err := cs.m.get(ctx, rv); err == nil && cs.m.ver.ReflectValueOf(ctx, rv).CanSet() {
		cs.was = append(cs.was, verWas{rv: rv, ver: v})
	}
}

// bumpIfChanged is the version's value in an upsert's DO UPDATE: the
// existing row's version plus one — when set is not empty, only if one of
// its assignments changes the row, else the version it has (GORM's
// association saves rewrite foreign keys to the values they already
// hold).
type bumpIfChanged struct {
	m        *model
	set      clause.Set
	distinct string
}

func (e bumpIfChanged) Build(b clause.Builder) {
	if len(e.set) > 0 {
		b.WriteString("CASE WHEN ")
		for i, a := range e.set {
			if i > 0 {
				b.WriteString(" OR ")
			}
			b.WriteQuoted(clause.Column{Table: clause.CurrentTable, Name: a.Column.Name})
			b.WriteString(e.distinct)
			b.AddVar(b, a.Value)
		}
	}
	writeBump(b, e.m.qcol, len(e.set) > 0)
}

// mysqlUpsert versions an ON DUPLICATE KEY UPDATE, or says why it cannot.
// gorm.io/driver/mysql builds the clause itself from DoUpdates (the
// plugin's clause builder is not called), MySQL's ON DUPLICATE KEY UPDATE
// takes no WHERE, and it assigns left to right, each assignment seeing the
// ones before it. So: an upsert of one struct, which must update only a
// row at the struct's version, is refused (create, then update); so is
// UpdateAll, which GORM expands only after the callbacks, into an
// assignment that would copy the struct's version into the row; a
// DoUpdates list (GORM's association saves) gets the version bump as its
// first assignment, so that it compares the row's old values:
//
//	ON DUPLICATE KEY UPDATE version = CASE WHEN NOT (owner_id <=> VALUES(owner_id)) THEN COALESCE(version, 0) + 1 ELSE version END, owner_id = VALUES(owner_id)
func mysqlUpsert(stmt *gorm.Statement, m *model, oc clause.OnConflict, skip bool) string {
	const advice = "create the row, then update it (a versioned Save, Update or Updates)"
	if oc.UpdateAll {
		return "MySQL's ON DUPLICATE KEY UPDATE of every column would copy the struct's version into the row: " + advice
	}
	if rv := stmt.ReflectValue; !skip && (rv.Kind() == reflect.Struct || rv.Kind() == reflect.Map) {
		return "MySQL's ON DUPLICATE KEY UPDATE takes no WHERE, so an upsert of one row cannot be checked against its version: " +
			advice + "; or opt out with SkipVersionCheck"
	}
	ups, named := m.withoutVersion(oc.DoUpdates)
	bump := mysqlBump{m: m}
	if !named {
		bump.set = ups
	}
	oc.DoUpdates = append(clause.Set{{Column: clause.Column{Name: m.column}, Value: bump}}, ups...)
	c := stmt.Clauses["ON CONFLICT"]
	c.Expression = oc
	stmt.Clauses["ON CONFLICT"] = c
	return ""
}

// mysqlBump is bumpIfChanged in MySQL's spelling: NOT (a <=> b) for IS
// DISTINCT FROM, VALUES(c) for the inserted row's column.
type mysqlBump struct {
	m   *model
	set clause.Set
}

func (e mysqlBump) Build(b clause.Builder) {
	if len(e.set) > 0 {
		b.WriteString("CASE WHEN ")
		for i, a := range e.set {
			if i > 0 {
				b.WriteString(" OR ")
			}
			b.WriteString("NOT (")
			b.WriteQuoted(clause.Column{Name: a.Column.Name})
			b.WriteString(" <=> ")
			if col, ok := a.Value.(clause.Column); ok && col.Table == "excluded" {
				col.Table = ""
				b.WriteString("VALUES(")
				b.WriteQuoted(col)
				b.WriteString(")")
			} else {
				b.AddVar(b, a.Value)
			}
			b.WriteString(")")
		}
	}
	writeBump(b, e.m.qcol, len(e.set) > 0)
}

// savepointName is the savepoint protect sets in the caller's
// transaction; it is released before any other statement runs.
const savepointName = "sqlock_upsert"

// protect makes sure the INSERT of a checked upsert of a loaded struct
// can be taken back: one statement cannot both update the row at the
// struct's version and refuse to insert when the row is gone, so the
// refusal (afterCreate) comes after the INSERT. GORM's implicit
// transaction rolls it back when GORM began one; otherwise the plugin
// sets a savepoint in the caller's transaction, or, with no transaction
// (SkipDefaultTransaction), runs the statement in one of its own. Either
// is ended by settle right after the statement, before GORM's
// associations and after-hooks, which run as they would without it.
func (cs *createState) protect(db *gorm.DB) error {
	if _, started := db.InstanceGet("gorm:started_transaction"); started {
		return nil
	}
	stmt := db.Statement
	ctx := stmt.Context
	if _, inTx := stmt.ConnPool.(gorm.TxCommitter); inTx {
		if _, err := stmt.ConnPool.ExecContext(ctx, "SAVEPOINT "+savepointName); err != nil {
			return err
		}
		cs.savepoint = true
		return nil
	}
	var (
		tx  gorm.ConnPool
		err error
	)
	switch b := stmt.ConnPool.(type) {
	case gorm.TxBeginner:
		tx, err = b.BeginTx(ctx, nil)
	case gorm.ConnPoolBeginner:
		tx, err = b.BeginTx(ctx, nil)
	default:
		return &UnsupportedError{Table: stmt.Table, Op: "create",
			Reason: "a checked upsert of a loaded struct needs a transaction to take back the INSERT of a row that is gone, " +
				"and the connection pool cannot begin one"}
	}
	if err != nil {
		return err
	}
	cs.pool, stmt.ConnPool = stmt.ConnPool, tx
	return nil
}

// settle ends what protect opened: it takes the statement back when it
// failed (or was refused) and keeps it otherwise.
func (cs *createState) settle(db *gorm.DB) {
	stmt := db.Statement
	ctx := stmt.Context
	switch {
	case cs.savepoint:
		cs.savepoint = false
		if db.Error != nil {
			cs.wrote = false
			if _, err := stmt.ConnPool.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+savepointName); err != nil {
				db.AddError(err)
				return
			}
		}
		if _, err := stmt.ConnPool.ExecContext(ctx, "RELEASE SAVEPOINT "+savepointName); err != nil {
			db.AddError(err)
		}
	case cs.pool != nil:
		tx, _ := stmt.ConnPool.(gorm.TxCommitter)
		stmt.ConnPool, cs.pool = cs.pool, nil
		if tx == nil {
			return
		}
		if db.Error != nil {
			cs.wrote = false
			_ = tx.Rollback() // the error the caller needs is db.Error
			return
		}
		if err := tx.Commit(); err != nil {
			cs.wrote = false
			db.AddError(err)
		}
	}
}

// withoutVersion returns an upsert's DoUpdates without its assignments to
// the version column (room left for the bump), and whether it had any.
func (m *model) withoutVersion(set clause.Set) (ups clause.Set, named bool) {
	ups = make(clause.Set, 0, len(set)+1)
	for _, a := range set {
		if a.Column.Name == m.column || a.Column.Name == m.ver.Name {
			named = true
		} else {
			ups = append(ups, a)
		}
	}
	return ups, named
}

// writeBump writes the version's new value in an upsert: COALESCE(version,
// 0) + 1, and when cased (after the CASE WHEN … the caller wrote) THEN
// that ELSE version END.
func writeBump(b clause.Builder, qcol any, cased bool) {
	if cased {
		b.WriteString(" THEN ")
	}
	b.WriteString("COALESCE(")
	b.WriteQuoted(qcol)
	b.WriteString(", 0) + 1")
	if cased {
		b.WriteString(" ELSE ")
		b.WriteQuoted(qcol)
		b.WriteString(" END")
	}
}
