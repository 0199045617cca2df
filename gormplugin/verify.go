package gormplugin

import (
	"context"
	"database/sql"
	"errors"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sqlock/sqlock/internal/vguard"
)

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
	if holds(db, g.wrote) {
		if g.wrote {
			p.recordUndo(stmt, g)
		}
		return
	}
	g.restore(stmt.Context)
}

// holds reports whether a statement that wrote its row still holds once
// GORM's commit or rollback ran: not when the operation failed inside the
// transaction GORM began for it, which rolled the write back.
func holds(db *gorm.DB, wrote bool) bool {
	if !wrote || db.Error == nil {
		return wrote
	}
	_, started := db.InstanceGet("gorm:started_transaction")
	return !started
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
