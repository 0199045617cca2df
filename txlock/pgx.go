package txlock

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/nilcheck"
)

// PgxDB is the pgx handle DoPgx runs on: *pgxpool.Pool, *pgxpool.Conn or
// *pgx.Conn. With these, BEGIN carries the lock statements, so a locked
// transaction costs the round trips of the same unlocked one, and a failed
// lock wait is rolled back on the spot so that the pool keeps the
// connection. Any other implementation is begun with plain options and
// locked by one more statement.
type PgxDB interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// DoPgx is Do for pgx: fn runs in a transaction holding the advisory lock
// on key (and on the keys of AlsoLock), committed when fn returns nil,
// rolled back otherwise, and run again as a whole on the same errors as
// Do. fn must be safe to run more than once.
func DoPgx(ctx context.Context, db PgxDB, key advisory.Key, fn func(ctx context.Context, tx pgx.Tx) error, opts ...Option) error {
	if nilcheck.Is(db) {
		return lockedtx.ErrNilDB
	}
	if fn == nil {
		return lockedtx.ErrNilFunc
	}
	return lockedtx.Run(ctx, db, key, lockedtx.PgxBegin(db), fn, opts)
}
