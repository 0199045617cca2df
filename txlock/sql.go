package txlock

import (
	"context"
	"database/sql"
	"database/sql/driver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/nilcheck"
	"github.com/sqlock/sqlock/internal/txbatch"
)

// DB is the database/sql handle Do runs on: *sql.DB, *sql.Conn, or a type
// embedding one (sqlx's *sqlx.DB).
type DB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Do runs fn in a database/sql transaction that holds the advisory lock on
// key (and on the keys of AlsoLock) from before fn's first statement until
// COMMIT or ROLLBACK, and retries the whole transaction (fn included) on
// serialization failures, deadlocks and stale versioned writes. fn must be
// safe to run more than once; see the package documentation for the whole
// contract.
//
// With a *sql.DB opened by OpenDB (or on WrapConnector), BEGIN carries the
// lock: a transaction costs the round trips of the same unlocked one. On any
// other handle the lock is one more round trip, right after BEGIN.
//
// A handle whose driver serves another engine (MySQL, MariaDB, SQLite) is
// refused with an error matching [sqlock.ErrUnsupported] before anything is
// sent: advisory locks are PostgreSQL's.
func Do(ctx context.Context, db DB, key advisory.Key, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	if err := refuseSQLCall(db, fn == nil); err != nil {
		return err
	}
	return lockedtx.Run(ctx, db, key, lockedtx.SQLBegin(db), fn, opts)
}

// OpenDB opens a *sql.DB on pgx's database/sql driver (stdlib.OpenDB) whose
// connections let Do fold the lock statements into BEGIN: a locked
// transaction then costs the round trips of the same unlocked one, as with
// DoPgx. Everything else behaves as with stdlib.OpenDB, except that
// sql.Conn.Raw hands out a wrapper of *stdlib.Conn: reach the *pgx.Conn
// through interface{ Conn() *pgx.Conn }, not a type assertion to
// *stdlib.Conn. lease's BeginGuarded sends its guard with BEGIN on these
// connections too.
func OpenDB(config pgx.ConnConfig, opts ...stdlib.OptionOpenDB) *sql.DB {
	return sql.OpenDB(WrapConnector(stdlib.GetConnector(config, opts...)))
}

// WrapConnector wraps a connector of pgx's stdlib driver
// (stdlib.GetConnector, stdlib.GetPoolConnector) as OpenDB does. Connections
// of any other driver are passed through unchanged; Do still works on them,
// with the lock as a statement of its own.
func WrapConnector(c driver.Connector) driver.Connector { return txbatch.WrapConnector(c) }

// refuseSQLCall is the refusal, before anything is sent, of a database/sql
// call (Do, DoOptimistic) on a nil handle, with a nil fn, or on another
// engine's driver.
func refuseSQLCall(db DB, nilFn bool) error {
	switch {
	case nilcheck.Is(db):
		return lockedtx.ErrNilDB
	case nilFn:
		return lockedtx.ErrNilFunc
	}
	return otherEngine(db)
}
