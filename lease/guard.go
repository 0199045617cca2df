package lease

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/pgerror"
)

// sqlTx is a database/sql transaction, or a wrapper that runs its queries
// in one (sqlx's *sqlx.Tx, GORM's transaction ConnPool).
type sqlTx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Guard makes tx's commit depend on the lease: in one statement inside
// the transaction it checks that the lease is still this holder's and
// unexpired on the server's clock, and locks its row (FOR KEY SHARE) so
// that nobody can take it over until tx ends — even if it expires
// meanwhile. The writes tx makes after Guard therefore commit only while
// the lease is this holder's. Renewals are not blocked.
//
// tx is a *sql.Tx (so also sqlx's *sqlx.Tx, and GORM's transaction
// tx.Statement.ConnPool) or a pgx.Tx; a *sql.DB or *sql.Conn, which are
// not transactions, is refused with [sqlock.ErrUnsupported]. If the lease
// is lost, locally or on the server, Guard returns an error matching
// [ErrLost] (a released lease: [ErrNotHeld]) and the caller must roll back.
// Under REPEATABLE READ or SERIALIZABLE, call Guard first in the
// transaction: a renewal committed after the snapshot makes the row lock
// fail with a serialization error.
func (l *Lease) Guard(ctx context.Context, tx any) error {
	if l == nil {
		return &Error{Op: "guard", Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil lease")}
	}
	var run func(dest *int64) error
	args := []any{l.Name(), l.a.owner}
	switch t := tx.(type) {
	case nil:
		return &Error{Op: "guard", Name: l.Name(), Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil transaction")}
	case *sql.DB, *sql.Conn:
		return &Error{Op: "guard", Name: l.Name(),
			Cause: errkind.New(sqlock.ErrUnsupported, "lease: Guard needs a transaction, not a %T", tx)}
	case pgx.Tx:
		run = func(dest *int64) error { return t.QueryRow(ctx, l.a.m.stmt.guard, args...).Scan(dest) }
	case sqlTx:
		run = func(dest *int64) error { return t.QueryRowContext(ctx, l.a.m.stmt.guard, args...).Scan(dest) }
	default:
		return &Error{Op: "guard", Name: l.Name(),
			Cause: errkind.New(sqlock.ErrUnsupported, "lease: Guard cannot run in a %T", tx)}
	}
	if err := l.localGuardError(); err != nil {
		return err
	}
	var token int64
	return l.guardResult(run(&token))
}

// guardResult turns the guard statement's outcome into Guard's error.
func (l *Lease) guardResult(err error) error {
	if err == nil {
		return nil
	}
	if pgerror.Code(err) == pgerror.InvalidTextRepr && strings.Contains(err.Error(), guardMarker) {
		l.tl.Hold().MarkLost(errors.New("a guard found the lease no longer this holder's on the server"))
		return &Error{Op: "guard", Name: l.Name(), Err: ErrLost,
			Cause: errors.New("the server no longer has the lease as this holder's (expired or taken over); the transaction is aborted")}
	}
	return &Error{Op: "guard", Name: l.Name(), Cause: pgerror.PoolerPrepared(err)}
}

// QueueGuard queues the check of [Lease.Guard] in b, a pgx batch to be
// sent in a transaction, ahead of the writes the caller queues after it:
// the guard then costs no round trip of its own. If the lease is not this
// holder's, the server aborts the transaction at the guard, the writes
// queued after it do not run, and the batch's results report an error
// matching [ErrLost]; the caller must roll back. A released or locally
// lost lease queues a statement that fails the same way without asking
// the server.
func (l *Lease) QueueGuard(b *pgx.Batch) {
	if released, lost := l.tl.Hold().Status(); released || lost != nil {
		b.Queue(`SELECT ($1::text)::bigint`, guardMarker+"0").QueryRow(func(r pgx.Row) error {
			var token int64
			return l.guardResult(r.Scan(&token))
		})
		return
	}
	b.Queue(l.a.m.stmt.guard, l.Name(), l.a.owner).QueryRow(func(r pgx.Row) error {
		var token int64
		return l.guardResult(r.Scan(&token))
	})
}

// localGuardError is Guard's refusal of a lease that is released or
// locally lost, nil otherwise.
func (l *Lease) localGuardError() error {
	released, lostErr := l.tl.Hold().Status()
	switch {
	case released:
		return &Error{Op: "guard", Name: l.Name(), Err: ErrNotHeld, Cause: errors.New("already released")}
	case lostErr != nil:
		return &Error{Op: "guard", Name: l.Name(), Err: ErrLost, Cause: lostErr}
	}
	return nil
}
