package txlock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
)

// DB is the database/sql handle Do runs on: *sql.DB, *sql.Conn, or a type
// embedding one (sqlx's *sqlx.DB).
type DB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Do runs fn in a database/sql transaction that holds the advisory lock on
// key from before fn's first statement until COMMIT or ROLLBACK, and retries
// the whole transaction (fn included) on serialization failures and
// deadlocks. fn must be safe to run more than once; see the package
// documentation for the whole contract.
//
// With a *sql.DB opened by OpenDB (or on WrapConnector), BEGIN carries the
// lock: a transaction costs the round trips of the same unlocked one. On any
// other handle the lock is one more round trip, right after BEGIN.
func Do(ctx context.Context, db DB, key advisory.Key, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	return DoKeys(ctx, db, []advisory.Key{key}, fn, opts...)
}

// DoKeys is Do with several keys. They are locked in one canonical order
// (advisory.Key.Compare), duplicates once, so transactions asking for
// overlapping sets in any order cannot deadlock on each other's locks.
func DoKeys(ctx context.Context, db DB, keys []advisory.Key, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	if isNil(db) {
		return ErrNilDB
	}
	if fn == nil {
		return ErrNilFunc
	}
	prepares := onPgxStdlib(db)
	pool, _ := db.(*sql.DB)
	return run(ctx, db, keys, func(ctx context.Context, a *Attempt) (*sql.Tx, Tx, error) {
		var conn *sql.Conn
		var on DB = db
		if _, ok := a.ctx.Deadline(); ok && pool != nil {
			// Under a deadline, the wait for a pooled connection ends with
			// the caller's context, BEGIN and the lock wait run on ctx (see
			// Run), and the connection's estimates set the wait's bound.
			c, err := pool.Conn(a.ctx)
			if err != nil {
				return nil, nil, err
			}
			c.Raw(func(dc any) error {
				if pc, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
					a.useConn(pc.Conn())
				}
				return nil
			})
			conn, on = c, c
		}
		tx, err := on.BeginTx(ctx, a.TxOptions())
		if err != nil {
			if conn != nil {
				conn.Close()
			}
			return nil, nil, err
		}
		if prepares {
			return tx, pgxStdlibTx{sqlTx{tx, conn}}, nil
		}
		return tx, sqlTx{tx, conn}, nil
	}, fn, opts)
}

// onPgxStdlib reports whether db is a pool of pgx's database/sql driver
// (stdlib.OpenDB, sql.Open("pgx", …), OpenDB), which prepares statements
// with bind arguments once per connection.
func onPgxStdlib(db DB) bool {
	d, ok := db.(interface{ Driver() driver.Driver })
	if !ok {
		return false
	}
	_, ok = d.Driver().(*stdlib.Driver)
	return ok
}

// pgxStdlibTx is a transaction of pgx's database/sql driver: a single lock
// statement goes with bind arguments, prepared once per connection.
type pgxStdlibTx struct{ sqlTx }

func (t pgxStdlibTx) execBound(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, q, args...)
	return err
}

// SQLTx adapts a *sql.Tx (or the one inside sqlx's *sqlx.Tx, or GORM's
// transaction's ConnPool) for Run.
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

// isNil reports whether h is nil or a nil pointer in an interface.
func isNil(h any) bool {
	switch d := h.(type) {
	case nil:
		return true
	case *sql.DB:
		return d == nil
	case *sql.Conn:
		return d == nil
	}
	v := reflect.ValueOf(h)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}
