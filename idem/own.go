package idem

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/internal/lockedtx"
)

// The transactions idem begins and ends itself ([DoTx], [Middleware]):
// the claim travels with BEGIN and the result with COMMIT, so that the
// key costs no round trip of its own, the way txlock folds its lock.
//
//   - pgx (pool, pool connection, connection): BEGIN and the claim are one
//     batch (lockedtx.BeginBatch), the store and COMMIT another
//     (lockedtx.CommitBatch).
//   - database/sql on a connection of txlock.OpenDB or WrapConnector: the
//     same batches, sent by the driver's connection when it is asked
//     (lockedtx.RequestBatch, BatchRequest.CommitWith).
//   - any other database/sql driver: the claim after BEGIN and the store
//     before COMMIT, as statements of their own.

// cleanupTimeout bounds a ROLLBACK sent after a failure, on a context
// detached from the caller's cancellation.
const cleanupTimeout = 5 * time.Second

// owned is a transaction idem began, with the claim statement's answer
// when BEGIN carried it.
type owned struct {
	conn  txConn
	tx    any       // *sql.Tx or pgx.Tx, for fn and TxFrom
	first *claimRow // nil when the claim was not sent with BEGIN
	// end commits (with the statement store and its arguments, if store
	// is not empty, in COMMIT's round trip where it can) or, for commit
	// false, rolls back; it releases what begin acquired. It is called
	// once.
	end func(ctx context.Context, commit bool, store string, args ...any) error
}

// openFunc begins a transaction whose first statement is the claim q.
type openFunc func(ctx context.Context, q string, args []any) (*owned, error)

// opener returns the openFunc of db, nil for a nil handle or one of
// another type.
func opener(db any) openFunc {
	switch h := db.(type) {
	case *pgxpool.Pool:
		if h != nil {
			return func(ctx context.Context, q string, args []any) (*owned, error) {
				pc, err := h.Acquire(ctx)
				if err != nil {
					return nil, err
				}
				o, err := openPgx(ctx, pc.Conn(), q, args, pc.Release)
				if err != nil {
					pc.Release()
				}
				return o, err
			}
		}
	case *pgxpool.Conn:
		if h != nil {
			return func(ctx context.Context, q string, args []any) (*owned, error) {
				return openPgx(ctx, h.Conn(), q, args, nil)
			}
		}
	case *pgx.Conn:
		if h != nil {
			return func(ctx context.Context, q string, args []any) (*owned, error) {
				return openPgx(ctx, h, q, args, nil)
			}
		}
	case *sql.DB:
		if h != nil {
			return func(ctx context.Context, q string, args []any) (*owned, error) { return openSQL(ctx, h, q, args) }
		}
	case *sql.Conn:
		if h != nil {
			return func(ctx context.Context, q string, args []any) (*owned, error) { return openSQL(ctx, h, q, args) }
		}
	}
	return nil
}

// openPgx begins a transaction on conn with the claim in BEGIN's round
// trip; release, if not nil, runs when it ends.
func openPgx(ctx context.Context, conn *pgx.Conn, q string, args []any, release func()) (*owned, error) {
	row := new(claimRow)
	tx, err := lockedtx.BeginBatch(ctx, conn, pgx.TxOptions{}, func(b *pgx.Batch) {
		b.Queue(q, args...).QueryRow(func(r pgx.Row) error { return r.Scan(row.dest()...) })
	})
	if err != nil {
		return nil, err
	}
	end := func(ctx context.Context, commit bool, store string, args ...any) error {
		if release != nil {
			defer release()
		}
		if !commit {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			return tx.Rollback(rctx)
		}
		if store == "" {
			return tx.Commit(ctx)
		}
		return lockedtx.CommitBatch(ctx, tx, func(b *pgx.Batch) { b.Queue(store, args...) })
	}
	return &owned{conn: pgxTx{tx}, tx: tx, first: row, end: end}, nil
}

// openSQL begins a database/sql transaction on db, asking its connection
// to send the claim with BEGIN (which connections of txlock.OpenDB do).
func openSQL(ctx context.Context, db interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, q string, args []any) (*owned, error) {
	row := new(claimRow)
	fctx, req := lockedtx.RequestBatch(ctx, func(b *pgx.Batch) {
		b.Queue(q, args...).QueryRow(func(r pgx.Row) error { return r.Scan(row.dest()...) })
	})
	tx, err := db.BeginTx(fctx, nil)
	folded := req.Folded()
	if err != nil {
		return nil, err
	}
	if !folded {
		row = nil
	}
	end := func(ctx context.Context, commit bool, store string, args ...any) error {
		if !commit {
			return tx.Rollback()
		}
		if store != "" {
			if folded {
				req.CommitWith(func(b *pgx.Batch) { b.Queue(store, args...) })
			} else if _, err := tx.ExecContext(ctx, store, args...); err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		return tx.Commit()
	}
	return &owned{conn: sqlTx{tx}, tx: tx, first: row, end: end}, nil
}
