package lease

import (
	"context"
	"database/sql"
	"errors"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/nilcheck"
	"github.com/sqlock/sqlock/internal/txbatch"
)

// BeginGuarded begins a transaction on db that [Lease.Guard] has already
// guarded: the writes made in it commit only while the lease is this
// holder's, and nobody can take the lease over until it ends. If the lease
// is not the holder's, no transaction is returned and the error matches
// [ErrLost] (a released lease: [ErrNotHeld]; then nothing is sent).
//
// On a *sql.DB opened with txlock.OpenDB or txlock.WrapConnector, BEGIN
// carries the guard in the same round trip, so a guarded transaction
// costs the round trips of the same unguarded one. On any other driver
// the guard is the transaction's first statement: one more round trip.
//
// db is a *sql.DB, a *sql.Conn, or a type embedding one (sqlx's *sqlx.DB);
// opts are database/sql's.
func (l *Lease) BeginGuarded(ctx context.Context, db interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, opts *sql.TxOptions) (*sql.Tx, error) {
	if l == nil {
		return nil, &Error{Op: "guard", Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil lease")}
	}
	if nilcheck.Is(db) {
		return nil, &Error{Op: "guard", Name: l.Name(), Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil database handle")}
	}
	if err := l.localGuardError(); err != nil {
		return nil, err
	}
	fctx, req := txbatch.RequestBatch(ctx, l.QueueGuard)
	tx, err := db.BeginTx(fctx, opts)
	folded := req.Folded()
	if err != nil {
		if e := (*Error)(nil); errors.As(err, &e) && e.Op == "guard" {
			return nil, err // the folded guard's own error
		}
		return nil, &Error{Op: "guard", Name: l.Name(), Cause: err}
	}
	if folded {
		return tx, nil
	}
	if err := l.Guard(ctx, tx); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return tx, nil
}
