package idem

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/nilcheck"
)

// txConn runs statements in the caller's transaction, whichever driver it
// is from.
type txConn interface {
	// queryRow scans the one row of query; errNoRows if there is none.
	queryRow(ctx context.Context, query string, args []any, dest ...any) error
	exec(ctx context.Context, query string, args ...any) error
	rollback(ctx context.Context)
}

var errNoRows = errors.New("idem: no rows")

func newTxConn(tx any) (txConn, error) {
	switch t := tx.(type) {
	case nil:
	case *sql.Tx:
		if t != nil {
			return sqlTx{t}, nil
		}
	case pgx.Tx:
		if !nilcheck.Is(t) { // a nil *pgxpool.Tx would panic on first use
			return pgxTx{t}, nil
		}
	default:
		return nil, errkind.New(sqlock.ErrUnsupported,
			"idem: a %T is not a transaction idem can use: pass a *sql.Tx (sqlx: tx.Tx; GORM: db.Statement.ConnPool.(*sql.Tx)) or a pgx.Tx", tx)
	}
	return nil, errkind.New(sqlock.ErrNilHandle, "idem: nil transaction")
}

type sqlTx struct{ tx *sql.Tx }

func (s sqlTx) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	err := s.tx.QueryRowContext(ctx, q, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return errNoRows
	}
	return err
}

func (s sqlTx) exec(ctx context.Context, q string, args ...any) error {
	_, err := s.tx.ExecContext(ctx, q, args...)
	return err
}

func (s sqlTx) rollback(context.Context) { _ = s.tx.Rollback() }

type pgxTx struct{ tx pgx.Tx }

func (p pgxTx) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	err := p.tx.QueryRow(ctx, q, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return errNoRows
	}
	return err
}

func (p pgxTx) exec(ctx context.Context, q string, args ...any) error {
	_, err := p.tx.Exec(ctx, q, args...)
	return err
}

func (p pgxTx) rollback(ctx context.Context) {
	_ = p.tx.Rollback(context.WithoutCancel(ctx))
}
