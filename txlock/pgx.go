package txlock

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/advisory"
)

// PgxDB is the pgx handle DoPgx runs on: *pgxpool.Pool, *pgxpool.Conn or
// *pgx.Conn. With these, BEGIN carries the lock statements, so a locked
// transaction costs the round trips of the same unlocked one, and a failed
// lock wait is rolled back on the spot so that the pool keeps the
// connection. BEGIN and the locks are one batch (pgx.Batch.BeginTx) run in
// the connection's exec mode: in pgx's default mode the lock statements are
// prepared once per connection, so the server does not parse and plan them
// for every transaction. Any other implementation is begun with plain
// options and locked by one more statement.
type PgxDB interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// DoPgx is Do for pgx: fn runs in a transaction holding the advisory lock
// on key, committed when fn returns nil, rolled back otherwise, and run
// again as a whole on serialization failures, deadlocks and stale versioned
// writes (the same errors as Do). fn must be safe
// to run more than once.
func DoPgx(ctx context.Context, db PgxDB, key advisory.Key, fn func(ctx context.Context, tx pgx.Tx) error, opts ...Option) error {
	return DoPgxKeys(ctx, db, []advisory.Key{key}, fn, opts...)
}

// DoPgxKeys is DoPgx with several keys, locked in canonical order.
func DoPgxKeys(ctx context.Context, db PgxDB, keys []advisory.Key, fn func(ctx context.Context, tx pgx.Tx) error, opts ...Option) error {
	if isNil(db) {
		return ErrNilDB
	}
	if fn == nil {
		return ErrNilFunc
	}
	var begin BeginFunc[pgx.Tx]
	switch d := db.(type) {
	case *pgxpool.Pool:
		begin = func(ctx context.Context, a *Attempt) (pgx.Tx, Tx, error) {
			// The wait for a pooled connection ends with the caller's
			// context; BEGIN and the lock wait run on ctx (see Run).
			pc, err := d.Acquire(a.ctx)
			if err != nil {
				return nil, nil, err
			}
			tx, err := beginLocked(ctx, pc.Conn(), a)
			if err != nil {
				pc.Release()
				return nil, nil, err
			}
			return tx, pgxTx{tx, pc}, nil
		}
	case *pgxpool.Conn:
		begin = connBegin(d.Conn())
	case *pgx.Conn:
		begin = connBegin(d)
	default:
		begin = func(ctx context.Context, a *Attempt) (pgx.Tx, Tx, error) {
			tx, err := db.BeginTx(ctx, a.cfg.pgxOpts)
			if err != nil {
				return nil, nil, err
			}
			return tx, pgxTx{tx: tx}, nil
		}
	}
	return run(ctx, db, keys, begin, fn, opts)
}

func connBegin(conn *pgx.Conn) BeginFunc[pgx.Tx] {
	return func(ctx context.Context, a *Attempt) (pgx.Tx, Tx, error) {
		tx, err := beginLocked(ctx, conn, a)
		if err != nil {
			return nil, nil, err
		}
		return tx, pgxTx{tx: tx}, nil
	}
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
