package txlock

import (
	"context"
	"database/sql"
	"database/sql/driver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// OpenDB opens a *sql.DB on pgx's database/sql driver (stdlib.OpenDB) whose
// connections let Do fold the lock statements into BEGIN: a locked
// transaction then costs the round trips of the same unlocked one, as with
// DoPgx. Everything else behaves as with stdlib.OpenDB, except that
// sql.Conn.Raw hands out a wrapper of *stdlib.Conn: reach the *pgx.Conn
// through interface{ Conn() *pgx.Conn }, not a type assertion to
// *stdlib.Conn.
func OpenDB(config pgx.ConnConfig, opts ...stdlib.OptionOpenDB) *sql.DB {
	return sql.OpenDB(WrapConnector(stdlib.GetConnector(config, opts...)))
}

// WrapConnector wraps a connector of pgx's stdlib driver
// (stdlib.GetConnector, stdlib.GetPoolConnector) as OpenDB does. Connections
// of any other driver are passed through unchanged; Do still works on them,
// with the lock as a statement of its own.
func WrapConnector(c driver.Connector) driver.Connector { return foldConnector{c} }

type foldConnector struct{ driver.Connector }

func (f foldConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := f.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if sc, ok := conn.(*stdlib.Conn); ok {
		return &foldConn{sc}, nil
	}
	return conn, nil
}

// stdConn names the embedded field of foldConn so that it does not hide
// the promoted Conn() *pgx.Conn method.
type stdConn = stdlib.Conn

// foldConn is a *stdlib.Conn (every method and optional driver interface of
// it promoted, Conn() included) whose BeginTx, when the context carries a
// txlock attempt whose locks are still to be taken, sends BEGIN and the lock
// statements as one message.
type foldConn struct{ *stdConn }

func (c *foldConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	a := attemptFrom(ctx)
	if a == nil {
		return c.stdConn.BeginTx(ctx, opts)
	}
	iso, ok := sqlIsolation(opts.Isolation)
	if !ok || !a.claimFold() {
		return c.stdConn.BeginTx(ctx, opts) // the driver's own error for an unknown level
	}
	conn := c.Conn()
	if conn.IsClosed() {
		a.endFold(false)
		return nil, driver.ErrBadConn
	}
	access := ""
	if opts.ReadOnly {
		access = "READ ONLY"
	}
	tx, err := beginBatch(ctx, conn, a, keywordOptions(iso, access, "", ""))
	if err != nil {
		a.endFold(false)
		if pgconn.SafeToRetry(err) {
			return nil, driver.ErrBadConn // nothing was sent: database/sql may try another connection
		}
		return nil, err
	}
	a.endFold(true)
	return foldTx{ctx, tx}, nil
}

// foldTx is stdlib's transaction wrapper, except that ROLLBACK runs on a
// context detached from the caller's cancellation, so that a cancelled
// caller's connection is rolled back and kept rather than closed.
type foldTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t foldTx) Commit() error { return t.tx.Commit(t.ctx) }

func (t foldTx) Rollback() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), cleanupTimeout)
	defer cancel()
	return t.tx.Rollback(ctx)
}
