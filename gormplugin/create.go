package gormplugin

import (
	"context"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

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
	if holds(db, cs.wrote) {
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
