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
	return func(ctx context.Context, a *Attempt) (*sql.Tx, Tx, bool, error) {
		var conn *sql.Conn
		var on SQLDB = db
		if _, ok := a.ctx.Deadline(); ok && pool != nil {
			// Under a deadline, the wait for a pooled connection ends with
			// the caller's context, BEGIN and the lock wait run on ctx (see
			// BeginFunc), and the connection's estimates set the wait's
			// bound.
			c, err := pool.Conn(a.ctx)
			if err != nil {
				return nil, nil, false, err
			}
			c.Raw(func(dc any) error {
				if pc, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
					a.useConn(pc.Conn())
				}
				return nil
			})
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
			if conn != nil {
				conn.Close()
			}
			return nil, nil, false, err
		}
		if prepares {
			return tx, pgxStdlibTx{sqlTx{tx, conn}}, folded, nil
		}
		return tx, sqlTx{tx, conn}, folded, nil
	}
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
				pc.Release()
				return nil, nil, false, err
			}
			return tx, pgxTx{tx, pc}, folded, nil
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
// returned to the pool once the transaction ends.
type sqlTx struct {
	tx *sql.Tx
	c  *sql.Conn
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
// runs on, released once the transaction ends.
type pgxTx struct {
	tx pgx.Tx
	pc *pgxpool.Conn
}

func (t pgxTx) Exec(ctx context.Context, q string) error {
	_, err := t.tx.Exec(ctx, q)
	return err
}

func (t pgxTx) Commit(ctx context.Context) error {
	err := t.tx.Commit(ctx)
	if t.pc != nil {
		t.pc.Release()
	}
	return err
}

func (t pgxTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if t.pc != nil {
		t.pc.Release()
	}
	return err
}
