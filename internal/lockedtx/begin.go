package lockedtx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// The BeginFuncs of txlock's handles, and the Tx drivers of database/sql
// and pgx transactions.

// SQLDB is a database/sql handle: *sql.DB, *sql.Conn, or a type embedding
// one.
type SQLDB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// PgxDB is a pgx handle: *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn, or
// another implementation (begun without folding).
type PgxDB interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// SQLBegin is the BeginFunc of a database/sql handle.
func SQLBegin(db SQLDB) BeginFunc[*sql.Tx] {
	prepares := onPgxStdlib(db)
	pool, _ := db.(*sql.DB)
	given, _ := db.(*sql.Conn)
	return func(ctx context.Context, a *Attempt) (*sql.Tx, Tx, bool, error) {
		var on SQLDB = db
		if given != nil && a.ctx.Done() != nil {
			if err := a.RunsOn(given); err != nil {
				return nil, nil, false, err
			}
		}
		var conn *sql.Conn
		if a.needsConn(pool, prepares) {
			c, err := pool.Conn(a.ctx)
			if err != nil {
				return nil, nil, false, err
			}
			if err := a.RunsOn(c); err != nil {
				c.Close()
				return nil, nil, false, err
			}
			conn, on = c, c
		}
		// BeginSQL, with on.BeginTx called directly (a method value would
		// cost an allocation per transaction).
		sent := time.Now()
		tx, err := on.BeginTx(a.foldRequest(ctx), a.cfg.SQLOpts)
		folded := a.folded() && err == nil
		if err == nil && !folded {
			a.begunAlone(sent)
		}
		if err != nil {
			a.Unpin(conn)
			return nil, nil, false, err
		}
		if prepares {
			return tx, pgxStdlibTx{sqlTx{tx, conn, a}}, folded, nil
		}
		return tx, sqlTx{tx, conn, a}, folded, nil
	}
}

// NeedsConn reports whether attempt a's transaction must run on a
// connection of pool pinned for it, for an adapter that begins its own
// (sqlx's): when the caller's context has a deadline (the wait for a
// pooled connection ends with the caller's context, and the connection's
// estimates set the lock wait's bound) or, on pgx's driver, can be
// cancelled (a cancellation sends that connection's backend cancel
// requests: see txContext.follow). Take it with Context, record it with
// RunsOn, begin on it with the context the BeginFunc got, give it back
// after a failed BEGIN with Unpin, and the transaction's with ConnTx.
func (a *Attempt) NeedsConn(pool *sql.DB) bool {
	return a.needsConn(pool, pool != nil && onPgxStdlib(pool))
}

func (a *Attempt) needsConn(pool *sql.DB, pgxDriver bool) bool {
	_, deadline := a.ctx.Deadline()
	return pool != nil && (deadline || pgxDriver && a.ctx.Done() != nil)
}

// Context is the caller's context, which the wait for a pooled connection
// ends with.
func (a *Attempt) Context() context.Context { return a.ctx }

// RunsOn records c as the connection attempt a's statements run on: one
// pinned for it (NeedsConn), or the caller's own *sql.Conn. On an error
// (the caller's cancellation has come) nothing may be sent on c.
func (a *Attempt) RunsOn(c *sql.Conn) error { return c.Raw(a.runsOnDriverConn) }

// Unpin gives back c, PinConn's connection (nil for none), after a BEGIN on
// it failed.
func (a *Attempt) Unpin(c *sql.Conn) {
	if c != nil {
		a.settle()
		c.Close()
	}
}

// ConnTx is the Tx of tx, a transaction begun on c (PinConn's connection,
// nil for none), which it gives back when the transaction ends.
func (a *Attempt) ConnTx(tx *sql.Tx, c *sql.Conn) Tx { return sqlTx{tx, c, a} }

// runsOnDriverConn is runsOn (and useConn) for a database/sql driver
// connection of pgx's: the *sql.Conn's Raw callback.
func (a *Attempt) runsOnDriverConn(dc any) error {
	pc, ok := dc.(interface{ Conn() *pgx.Conn })
	if !ok {
		return nil
	}
	a.useConn(pc.Conn())
	return a.runsOn(pc.Conn())
}

// onPgxStdlib reports whether db is a pool of pgx's database/sql driver
// (stdlib.OpenDB, sql.Open("pgx", …), txlock.OpenDB), which prepares
// statements with bind arguments once per connection.
func onPgxStdlib(db SQLDB) bool {
	d, ok := db.(interface{ Driver() driver.Driver })
	if !ok {
		return false
	}
	_, ok = d.Driver().(*stdlib.Driver)
	return ok
}

// PgxBegin is the BeginFunc of a pgx handle: *pgxpool.Pool, *pgxpool.Conn
// and *pgx.Conn fold (BeginPgx); any other implementation is begun with
// the plain options and locked by one more statement.
func PgxBegin(db PgxDB) BeginFunc[pgx.Tx] {
	switch d := db.(type) {
	case *pgxpool.Pool:
		return func(ctx context.Context, a *Attempt) (pgx.Tx, Tx, bool, error) {
			// The wait for a pooled connection ends with the caller's
			// context; BEGIN and the lock wait run on ctx (see BeginFunc).
			pc, err := d.Acquire(a.ctx)
			if err != nil {
				return nil, nil, false, err
			}
			tx, folded, err := BeginPgx(ctx, pc.Conn(), a)
			if err != nil {
				a.settle()
				pc.Release()
				return nil, nil, false, err
			}
			return tx, pgxTx{tx, pc, a}, folded, nil
		}
	case *pgxpool.Conn:
		return connBegin(d.Conn())
	case *pgx.Conn:
		return connBegin(d)
	}
	return func(ctx context.Context, a *Attempt) (pgx.Tx, Tx, bool, error) {
		sent := time.Now()
		tx, err := db.BeginTx(ctx, a.cfg.PgxOpts)
		if err != nil {
			return nil, nil, false, err
		}
		a.begunAlone(sent)
		return tx, pgxTx{tx: tx}, false, nil
	}
}

func connBegin(conn *pgx.Conn) BeginFunc[pgx.Tx] {
	return func(ctx context.Context, a *Attempt) (pgx.Tx, Tx, bool, error) {
		tx, folded, err := BeginPgx(ctx, conn, a)
		if err != nil {
			return nil, nil, false, err
		}
		return tx, pgxTx{tx: tx}, folded, nil
	}
}

// SQLTx adapts a *sql.Tx (or the one inside sqlx's *sqlx.Tx) for Run.
func SQLTx(tx *sql.Tx) Tx { return sqlTx{tx: tx} }

// sqlTx drives a *sql.Tx; c, when set, is the connection it runs on,
// returned to the pool once the transaction ends and attempt a's step has
// settled.
type sqlTx struct {
	tx *sql.Tx
	c  *sql.Conn
	a  *Attempt
}

func (t sqlTx) Exec(ctx context.Context, q string) error {
	_, err := t.tx.ExecContext(ctx, q)
	return err
}

func (t sqlTx) Commit(context.Context) error {
	err := t.tx.Commit()
	t.done()
	return err
}

func (t sqlTx) Rollback(context.Context) error {
	err := t.tx.Rollback()
	t.done()
	return err
}

func (t sqlTx) done() {
	if t.c != nil {
		t.a.settle()
		t.c.Close()
	}
}

// pgxStdlibTx is a transaction of pgx's database/sql driver: a single lock
// statement goes with bind arguments, prepared once per connection.
type pgxStdlibTx struct{ sqlTx }

func (t pgxStdlibTx) execBound(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, q, args...)
	return err
}

// pgxTx drives a pgx transaction; pc, when set, is the pool connection it
// runs on, released once the transaction ends and attempt a's step has
// settled.
type pgxTx struct {
	tx pgx.Tx
	pc *pgxpool.Conn
	a  *Attempt
}

func (t pgxTx) Exec(ctx context.Context, q string) error {
	_, err := t.tx.Exec(ctx, q)
	return err
}

func (t pgxTx) Commit(ctx context.Context) error {
	err := t.tx.Commit(ctx)
	t.release()
	return err
}

func (t pgxTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	t.release()
	return err
}

func (t pgxTx) release() {
	if t.pc != nil {
		t.a.settle()
		t.pc.Release()
	}
}
