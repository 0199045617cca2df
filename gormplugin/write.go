package gormplugin

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"strconv"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/vguard"
	"github.com/sqlock/sqlock/versioned"
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

func (p *Plugin) beforeUpdate(db *gorm.DB) {
	stmt := db.Statement
	if stmt.SQL.Len() != 0 {
		return
	}
	m := p.versionedModel(db)
	if m == nil {
		return
	}
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

// stateOf returns the state a before-callback left on the statement for
// its after-callback (a *guard for updates and deletes, a *createState for
// creates), or nil.
func stateOf[T clause.Expression](stmt *gorm.Statement) T {
	st, _ := stmt.Clauses[stateKey].Expression.(T)
	return st
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

func (p *Plugin) beforeDelete(db *gorm.DB) {
	stmt := db.Statement
	if stmt.SQL.Len() != 0 {
		return
	}
	m := p.versionedModel(db)
	if m == nil {
		return
	}
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

// finish runs last, after GORM's commit or rollback: when the operation
// failed and its write did not hold — never made, or rolled back with
// GORM's implicit transaction — it puts the struct's version (and a soft
// delete's deleted_at) back, so the struct equals the row. A write that
// holds (no implicit transaction, or inside the caller's own transaction)
// keeps them; inside Transaction it is recorded for undo on rollback.
func (p *Plugin) finish(db *gorm.DB) {
	stmt := db.Statement
	g := stateOf[*guard](stmt)
	if g == nil {
		return
	}
	delete(stmt.Clauses, stateKey)
	if !g.bumped && !g.softWas.IsValid() && !g.fenced {
		return
	}
	held := g.wrote
	if db.Error != nil && held {
		if _, started := db.InstanceGet("gorm:started_transaction"); started {
			held = false
		}
	}
	if held {
		if g.wrote {
			p.recordUndo(stmt, g)
		}
		return
	}
	g.restore(stmt.Context)
}

// restore puts rv's version and soft-delete field back as they were
// before the statement.
func (g *guard) restore(ctx context.Context) {
	if g.bumped {
		g.m.set(ctx, g.rv, g.expected)
		g.bumped = false
	}
	if g.softWas.IsValid() {
		g.m.softF.ReflectValueOf(ctx, g.rv).Set(g.softWas)
	}
	if g.fenced {
		g.m.setFence(ctx, g.rv, g.fenceWas)
		g.fenced = false
	}
}

// verify turns the row count of a checked single-row write into its
// outcome: the new version in memory, or the error vguard makes of it.
func (p *Plugin) verify(db *gorm.DB, g *guard, bumped bool) {
	stmt := db.Statement
	if n := db.RowsAffected; n != 1 {
		db.AddError(p.vguardOf(db, g).Outcome(stmt.Context, n))
		return
	}
	g.wrote = true
	if bumped {
		g.bumped = g.m.set(stmt.Context, g.rv, g.expected+1)
		if g.token > 0 {
			g.fenceWas, g.fenced = g.m.setFence(stmt.Context, g.rv, g.token)
		}
	}
}

// vguardOf describes g's statement, which did not write exactly one row,
// for vguard. A fenced write is always probed (vguard says why), and so is
// every write under NullRefused, which must tell a NULL version from a
// stale one.
func (p *Plugin) vguardOf(db *gorm.DB, g *guard) vguard.Guard {
	stmt := db.Statement
	ctx := stmt.Context
	key := g.m.key(ctx, g.rv)
	vg := p.vguardFor(db, key, g.expected, g.op)
	vg.Token = g.token
	if p.cfg.probe || p.cfg.null == NullRefused || g.token > 0 {
		vg.Probe = func(context.Context) (ver, fence sql.NullInt64, err error) {
			ver, fence, err = probe(db, g)
			if !ver.Valid && g.orNull && err == nil {
				// Not NULL but 0 to this write: under NullAsZero a
				// struct at version 0 matches a NULL version too.
				ver.Valid = true
			}
			return ver, fence, err
		}
	}
	if p.cfg.null == NullRefused {
		vg.NullVersion = &NullVersionError{Table: stmt.Table, Column: g.m.column, Key: key}
	}
	return vg
}

// probe reads the row's version (and, for a fenced write, its fence) by
// primary key, on the statement's own connection (inside its
// transaction), ignoring soft delete; sql.ErrNoRows when there is no row.
func probe(db *gorm.DB, g *guard) (ver, fence sql.NullInt64, err error) {
	stmt := db.Statement
	ctx := stmt.Context
	m := g.m
	conds := make([]clause.Expression, len(m.pks))
	for i, f := range m.pks {
		v, _ := f.ValueOf(ctx, g.rv)
		conds[i] = clause.Eq{Column: clause.Column{Name: f.DBName}, Value: v}
	}
	cols := []clause.Column{{Name: m.column}}
	if g.token > 0 {
		cols = append(cols, clause.Column{Name: m.fence.DBName})
	}
	clauses := []clause.Expression{clause.Select{Columns: cols}, clause.Where{Exprs: conds}}
	if db.Dialector.Name() == "mysql" {
		// A locking read: in a REPEATABLE READ transaction (MySQL's
		// default) a plain SELECT reads the transaction's snapshot, while
		// the write it explains saw the newest row. The failed write
		// already holds the row's lock there, so this adds no wait.
		clauses = append(clauses, clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	tx := db.Session(&gorm.Session{NewDB: true, SkipHooks: true, Context: ctx}).
		Table(stmt.Table).
		Clauses(clauses...).
		Limit(1)
	row := tx.Row()
	if tx.Error != nil {
		return ver, fence, tx.Error
	}
	if row == nil {
		return ver, fence, errors.New("gormplugin: probe returned no row handle")
	}
	dest := []any{&ver}
	if g.token > 0 {
		dest = append(dest, &fence)
	}
	err = row.Scan(dest...)
	return ver, fence, err
}

// createState is what a versioned create leaves for the callbacks after
// it: the statement settings the plugin changed (put back once the INSERT
// is built and sent) and the versions it may change in memory (put back if
// the create does not hold).
type createState struct {
	m          *model
	was        []verWas // structs whose version the create sets (to 1, or from RETURNING)
	upsert     bool     // an ON CONFLICT … DO UPDATE
	checked    bool     // … of one struct, checked against its version
	wrote      bool
	selects    []string
	omits      []string
	selChanged bool
	conflict   *clause.Clause // the caller's ON CONFLICT, when the plugin rewrote it
	returning  *clause.Clause // the RETURNING before the plugin added the version to it
	retAdded   bool           // the plugin added the RETURNING clause
	savepoint  bool           // the plugin set a savepoint in the caller's transaction
	pool       gorm.ConnPool  // the statement's pool, while it runs in the plugin's transaction
}

// verWas is a struct's version before a create.
type verWas struct {
	rv  reflect.Value
	ver int64
}

func (*createState) Build(clause.Builder) {}

func (p *Plugin) beforeCreate(db *gorm.DB) {
	m := p.versionedModel(db)
	if m == nil {
		return
	}
	stmt := db.Statement
	cs := &createState{m: m}
	if c, ok := stmt.Clauses["ON CONFLICT"]; ok {
		oc, _ := c.Expression.(clause.OnConflict)
		skip := skipped(db)
		if oc.UpdateAll && !skip {
			db.AddError(&UnsupportedError{Table: stmt.Table, Op: "create",
				Reason: "an upsert that updates every column would overwrite a newer row without a version check " +
					"(this is what Save of a slice does): update rows one at a time, or opt out with SkipVersionCheck"})
			return
		}
		if !oc.DoNothing && (oc.UpdateAll || len(oc.DoUpdates) > 0) {
			if m.fence != nil && !skip {
				db.AddError(&UnsupportedError{Table: stmt.Table, Op: "create",
					Reason: "an upsert of a fenced model would update the row without its fence: " +
						"create it, then write it with a fenced Update; or opt out with SkipVersionCheck"})
				return
			}
			if stmt.Dialector.Name() == "mysql" {
				if reason := mysqlUpsert(stmt, m, oc, skip); reason != "" {
					db.AddError(&UnsupportedError{Table: stmt.Table, Op: "create", Reason: reason})
					return
				}
			} else {
				cs.monotonicUpsert(stmt, c, !skip, p.cfg.null == NullAsZero)
			}
		}
	}
	if !cs.selectVersion(stmt) {
		db.AddError(&UnsupportedError{Table: stmt.Table, Op: "create",
			Reason: "the create leaves out the version column " + m.column + ": the row would not get version 1"})
		cs.restoreStatement(stmt)
		return
	}
	if cs.checked && len(cs.was) == 1 && cs.was[0].ver != 0 && !db.DryRun {
		if err := cs.protect(db); err != nil {
			db.AddError(err)
			cs.restoreStatement(stmt)
			return
		}
	}
	initVersions(stmt.Context, cs, stmt.ReflectValue, stmt.Dest)
	stmt.Clauses[stateKey] = clause.Clause{Expression: cs}
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
	ups := make(clause.Set, 0, len(oc.DoUpdates)+1)
	named := false
	for _, a := range oc.DoUpdates {
		if a.Column.Name == m.column || a.Column.Name == m.ver.Name {
			named = true
		} else {
			ups = append(ups, a)
		}
	}
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
		b.WriteString(" THEN ")
	}
	b.WriteString("COALESCE(")
	b.WriteQuoted(e.m.qcol)
	b.WriteString(", 0) + 1")
	if len(e.set) > 0 {
		b.WriteString(" ELSE ")
		b.WriteQuoted(e.m.qcol)
		b.WriteString(" END")
	}
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

// selectVersion makes a create that Select or Omit would have written
// without the version column write it (the struct is given version 1, so
// must the row be). It reports false when it cannot.
func (cs *createState) selectVersion(stmt *gorm.Statement) bool {
	if len(stmt.Selects) == 0 && len(stmt.Omits) == 0 {
		return true
	}
	col := cs.m.column
	included := func() bool {
		sel, restricted := stmt.SelectAndOmitColumns(true, false)
		v, ok := sel[col]
		return (ok && v) || (!ok && !restricted)
	}
	if included() {
		return true
	}
	cs.selects, cs.omits, cs.selChanged = stmt.Selects, stmt.Omits, true
	if len(stmt.Omits) > 0 {
		omits := make([]string, 0, len(stmt.Omits))
		for _, o := range stmt.Omits {
			if f := stmt.Schema.LookUpField(o); f == nil || f != cs.m.ver {
				omits = append(omits, o)
			}
		}
		stmt.Omits = omits
	}
	if !included() && len(stmt.Selects) > 0 {
		stmt.Selects = append(stmt.Selects[:len(stmt.Selects):len(stmt.Selects)], cs.m.ver.Name)
	}
	return included()
}

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
			ups := make(clause.Set, 0, len(oc.DoUpdates)+1)
			named := false
			for _, a := range oc.DoUpdates {
				if a.Column.Name == m.column || a.Column.Name == m.ver.Name {
					named = true
				} else {
					ups = append(ups, a)
				}
			}
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
		b.WriteString(" THEN ")
	}
	b.WriteString("COALESCE(")
	b.WriteQuoted(e.m.qcol)
	b.WriteString(", 0) + 1")
	if len(e.set) > 0 {
		b.WriteString(" ELSE ")
		b.WriteQuoted(e.m.qcol)
		b.WriteString(" END")
	}
}

// restoreStatement puts back the statement settings beforeCreate changed,
// so that a reused chain is the caller's again.
func (cs *createState) restoreStatement(stmt *gorm.Statement) {
	if cs.selChanged {
		stmt.Selects, stmt.Omits, cs.selChanged = cs.selects, cs.omits, false
	}
	if cs.conflict != nil {
		stmt.Clauses["ON CONFLICT"] = *cs.conflict
		cs.conflict = nil
	}
	switch {
	case cs.retAdded:
		delete(stmt.Clauses, "RETURNING")
		cs.retAdded = false
	case cs.returning != nil:
		stmt.Clauses["RETURNING"] = *cs.returning
		cs.returning = nil
	}
}

// afterCreate runs right after GORM's INSERT: it notes whether the
// INSERT ran and gives the caller's chain back its settings.
func (p *Plugin) afterCreate(db *gorm.DB) {
	stmt := db.Statement
	cs := stateOf[*createState](stmt)
	if cs == nil {
		return
	}
	cs.restoreStatement(stmt)
	defer cs.settle(db)
	if db.Error != nil || db.DryRun {
		return
	}
	if cs.checked && db.RowsAffected == 0 {
		// The row was there and its version was not the struct's: the
		// DO UPDATE's WHERE left it alone.
		if rv := stmt.ReflectValue; rv.Kind() == reflect.Struct {
			w := cs.was[0].ver
			g := &guard{m: cs.m, rv: rv, expected: w, op: "update", orNull: w == 0 && p.cfg.null == NullAsZero}
			db.AddError(p.vguardOf(db, g).Outcome(stmt.Context, 0))
			return
		}
		db.AddError(p.vguardFor(db, nil, 0, "update").Outcome(stmt.Context, 0))
		return
	}
	cs.wrote = true
	if rv := stmt.ReflectValue; cs.checked && rv.Kind() == reflect.Struct {
		// A struct that was loaded (version > 0) upserts the row it was
		// loaded from: the DO UPDATE gives it its version + 1, the INSERT
		// its own version. The INSERT means that row is gone: recreating
		// it from a stale copy is refused, and the INSERT is taken back
		// (GORM's transaction, or what protect opened).
		if w := cs.was[0].ver; w != 0 {
			if v, _ := cs.m.get(stmt.Context, rv); v == w {
				db.AddError(p.vguardFor(db, cs.m.key(stmt.Context, rv), w, "update").Gone(stmt.Context))
			}
		}
	}
}

// finishCreate runs after GORM's commit or rollback: a create that failed
// and did not hold gives its structs their zero version back.
func (p *Plugin) finishCreate(db *gorm.DB) {
	stmt := db.Statement
	cs := stateOf[*createState](stmt)
	if cs == nil {
		return
	}
	delete(stmt.Clauses, stateKey)
	cs.settle(db) // a no-op: afterCreate settled, unless its callback was removed
	held := cs.wrote
	if db.Error != nil && held {
		if _, started := db.InstanceGet("gorm:started_transaction"); started {
			held = false
		}
	}
	if held {
		if len(cs.was) > 0 {
			p.recordCreateUndo(stmt, cs)
		}
		return
	}
	for _, w := range cs.was {
		cs.m.set(stmt.Context, w.rv, w.ver)
	}
}

// initVersions sets a zero version to 1 in every row a create writes.
func initVersions(ctx context.Context, cs *createState, rv reflect.Value, dest any) {
	m := cs.m
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
		cs.initStruct(ctx, rv)
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			if e := reflect.Indirect(rv.Index(i)); e.Kind() == reflect.Struct {
				cs.initStruct(ctx, e)
			}
		}
	}
}

func (cs *createState) initStruct(ctx context.Context, rv reflect.Value) {
	if cs.m.ver.ReflectValueOf(ctx, rv).IsZero() && cs.m.set(ctx, rv, 1) && !cs.upsert {
		cs.was = append(cs.was, verWas{rv: rv}) // an upsert noted every struct already
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
