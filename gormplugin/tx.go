package gormplugin

import (
	"context"
	"database/sql"

	"gorm.io/gorm"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/txlock"
)

// Transaction runs fn in a GORM transaction that holds
// pg_advisory_xact_lock(key) — and the locks of txlock.AlsoLock's keys, all
// in txlock's canonical order — from before fn's first statement until
// COMMIT or ROLLBACK, so the lock cannot leak, and retries the whole
// transaction — fn included — with txlock's policy (serialization
// failures, deadlocks and, since the versioned writes in fn return
// *versioned.StaleError, stale versions). fn must be safe to run more than
// once: it re-reads what it depends on. tx carries ctx; fn's error rolls
// the transaction back and is returned as it is (or wrapped in
// *retry.ExhaustedError when retries ran out).
//
// Everything about the lock and the retries is txlock's, as for txlock.Do:
// the wait is bounded (txlock.WithTimeout; a wait that runs out is an
// error matching txlock.ErrTimeout), txlock.TryOnce, txlock.Shared,
// txlock.WithRetry/WithoutRetry, txlock.WithTxOptions and COMMIT errors
// whose outcome is unknown (txlock.ErrAmbiguousCommit, never retried)
// apply as documented there. Open GORM over txlock.OpenDB —
// postgres.New(postgres.Config{Conn: txlock.OpenDB(cfg)}) — and BEGIN
// carries the lock, so a locked transaction costs the round trips of an
// unlocked one; on any other connection the lock is one more round trip.
//
// Inside fn, a locked transaction or an advisory lock on a key fn holds,
// asked for with fn's context (tx.Statement.Context) through the same
// *sql.DB, would wait for its own caller; it is refused at once with an
// error matching txlock.ErrAlreadyHeld (advisory.ErrAlreadyHeld for an
// advisory lock).
//
// With the plugin installed on db, a transaction that rolls back (or whose
// COMMIT fails) puts the versions and soft-delete fields of the structs
// fn's versioned writes changed back as they were, so they equal their
// rows again; after a txlock.ErrAmbiguousCommit, whose outcome is unknown,
// call Resync. GORM's PrepareStmt may be on or off.
//
// db must not already be inside a transaction, and its dialector must be
// PostgreSQL: on any other engine (SQLite, MySQL) advisory locks are not
// real and the call fails with *UnsupportedError before it begins. A nil
// db or fn is an error matching sqlock.ErrNilHandle.
func Transaction(ctx context.Context, db *gorm.DB, key advisory.Key, fn func(tx *gorm.DB) error, opts ...txlock.Option) error {
	if db == nil {
		return lockedtx.ErrNilDB
	}
	if fn == nil {
		return lockedtx.ErrNilFunc
	}
	if name := db.Name(); name != "postgres" {
		return &UnsupportedError{Op: "locked transaction",
			Reason: "advisory locks need PostgreSQL; this gorm.DB uses the " + name + " dialector"}
	}
	// The *sql.DB names the database for txlock's check against waiting on
	// one's own locks (an advisory.Locker on the same *sql.DB too).
	var pool any
	if sqlDB, err := db.DB(); err == nil {
		pool = sqlDB
	}
	p, _ := db.Config.Plugins[Name].(*Plugin)
	return lockedtx.Run(ctx, pool, key,
		func(ctx context.Context, a *lockedtx.Attempt) (*gorm.DB, lockedtx.Tx, bool, error) {
			tx, folded, err := lockedtx.BeginSQL(ctx, a, func(ctx context.Context, o *sql.TxOptions) (*gorm.DB, error) {
				tx := db.WithContext(ctx).Begin(o)
				return tx, tx.Error
			})
			if err != nil {
				return nil, nil, false, err
			}
			t := gormTx{tx: tx, p: p}
			if p != nil {
				t.log = p.track(tx.Statement.ConnPool)
			}
			return tx, t, folded, nil
		},
		func(ctx context.Context, tx *gorm.DB) error { return fn(tx.WithContext(ctx)) },
		opts)
}

// gormTx lets the engine drive a GORM transaction. With the plugin installed,
// the structs fn's versioned writes changed are put back when the
// transaction does not commit.
type gormTx struct {
	tx  *gorm.DB
	p   *Plugin
	log *undoLog
}

// Exec runs the engine's argument-less lock statements on the transaction's
// connection directly (database/sql sends them by the simple protocol).
// Under GORM's PrepareStmt the transaction's ConnPool would prepare them,
// and PostgreSQL cannot prepare several commands: they go to the
// transaction underneath.
func (t gormTx) Exec(ctx context.Context, q string) error {
	pool := t.tx.Statement.ConnPool
	if p, ok := pool.(*gorm.PreparedStmtTX); ok && p.Tx != nil {
		pool = p.Tx
	}
	_, err := pool.ExecContext(ctx, q)
	return err
}

func (t gormTx) Commit(ctx context.Context) error {
	pool := t.tx.Statement.ConnPool
	err := t.tx.Commit().Error
	t.done(ctx, pool, err != nil)
	return err
}

func (t gormTx) Rollback(ctx context.Context) error {
	pool := t.tx.Statement.ConnPool
	err := t.tx.Rollback().Error
	t.done(ctx, pool, true)
	return err
}

func (t gormTx) done(ctx context.Context, pool gorm.ConnPool, rolledBack bool) {
	if t.log != nil {
		t.p.untrack(ctx, pool, t.log, rolledBack)
	}
}
