package idem

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/txbatch"
)

// The transactions idem begins and ends itself ([DoTx], [Middleware]):
// the claim travels with BEGIN and the result with COMMIT, so that the
// key costs no round trip of its own, the way txlock folds its lock.
//
//   - pgx (pool, pool connection, connection): BEGIN and the claim are one
//     batch (txbatch.BeginBatch), the store and COMMIT another
//     (txbatch.CommitBatch).
//   - database/sql on a connection of txlock.OpenDB or WrapConnector: the
//     same batches, sent by the driver's connection when it is asked
//     (txbatch.RequestBatch, BatchRequest.CommitWith).
//   - any other database/sql driver: the claim after BEGIN and the store
//     before COMMIT, as statements of their own.

// cleanupTimeout bounds a ROLLBACK sent after a failure, on a context
// detached from the caller's cancellation.
const cleanupTimeout = 5 * time.Second

// owned is a transaction idem began.
type owned struct {
	conn   txConn
	tx     any  // *sql.Tx or pgx.Tx, for fn and TxFrom
	folded bool // BEGIN carried the queued statements (their callbacks ran)
	// end commits (with the statement store and its arguments, if store
	// is not empty, in COMMIT's round trip where it can) or, for commit
	// false, rolls back; it releases what begin acquired. It is called
	// once. A COMMIT of unknown outcome is an error matching
	// lockedtx.ErrAmbiguousCommit (commitOutcome).
	end func(ctx context.Context, commit bool, store string, args ...any) error
}

// openFunc begins a transaction and asks for the statements queue adds to
// be sent with BEGIN; owned.folded says whether they were.
type openFunc func(ctx context.Context, queue func(*pgx.Batch)) (*owned, error)

// openClaimed begins a transaction with open and claims k in it, the claim
// sent ahead of BEGIN where the connection allows (owned.folded; see
// claimAheadQueue): a recorded key is answered there, in one round trip,
// and no transaction is begun — cl.replay with o nil. noWait: a key held
// by a middleware request in progress is errBusy. On error or a replay
// nothing is left open; otherwise the key is the transaction's and the
// caller ends o.
func openClaimed(ctx context.Context, open openFunc, st statements, c *config, k keyOf, noWait bool) (o *owned, cl claimed, err error) {
	row := new(claimRow)
	o, err = open(ctx, claimAheadQueue(st, c, k, noWait, row))
	if answeredAhead(err, row) {
		cl, err = row.settle(k)
		return nil, cl, err
	}
	if err != nil {
		return nil, claimed{}, wrapDB("begin", err)
	}
	if !o.folded {
		row = nil // claim sends the claim after BEGIN
	}
	cl, err = claim(ctx, o.conn, st, c, k, noWait, row)
	if err != nil || cl.replay {
		_ = o.end(ctx, false, "")
		return nil, cl, err
	}
	return o, cl, nil
}

// claimAheadQueue queues k's claim ahead of BEGIN (txbatch.Ahead), its
// row scanned into row, in the form whose last column says that the key
// is recorded and not expired and then stops BEGIN (statements.claimAhead).
// The claim runs in the implicit transaction the server opens for the
// batch, which BEGIN makes explicit: the key's INSERT (and the
// middleware's try-lock) belong to the transaction fn runs in, and the
// batch holds two statements, BEGIN and the claim, as it would with the
// claim after BEGIN. For a recorded key the server skips BEGIN and rolls
// the implicit transaction back at the batch's Sync, so the replay is
// answered in one round trip and the connection is left idle, with no
// transaction to end. Where the INSERT waited for a transaction that then
// committed the key, the row says it found none, and claim reads it after
// BEGIN.
func claimAheadQueue(st statements, c *config, k keyOf, noWait bool, row *claimRow) func(*pgx.Batch) {
	_, q, args := claimStmt(st, c, k, noWait)
	return func(b *pgx.Batch) {
		txbatch.Ahead(b, func(b *pgx.Batch) {
			b.Queue(q, args...).QueryRow(func(r pgx.Row) error { return r.Scan(append(row.dest(), &row.answered)...) })
		})
	}
}

// answeredAhead reports whether err, BEGIN's, is the stop of the claim
// ahead of it after it returned a recorded key's row into row.
func answeredAhead(err error, row *claimRow) bool {
	return row.answered && txbatch.Stopped(err)
}

// opener returns the openFunc of db, nil for a nil handle or one of
// another type.
func opener(db any) openFunc {
	switch h := db.(type) {
	case *pgxpool.Pool:
		if h != nil {
			return func(ctx context.Context, queue func(*pgx.Batch)) (*owned, error) {
				pc, err := h.Acquire(ctx)
				if err != nil {
					return nil, err
				}
				o, err := openPgx(ctx, pc.Conn(), queue, pc.Release)
				if err != nil {
					pc.Release()
				}
				return o, err
			}
		}
	case *pgxpool.Conn:
		if h != nil {
			return func(ctx context.Context, queue func(*pgx.Batch)) (*owned, error) {
				return openPgx(ctx, h.Conn(), queue, nil)
			}
		}
	case *pgx.Conn:
		if h != nil {
			return func(ctx context.Context, queue func(*pgx.Batch)) (*owned, error) {
				return openPgx(ctx, h, queue, nil)
			}
		}
	case *sql.DB:
		if h != nil {
			return func(ctx context.Context, queue func(*pgx.Batch)) (*owned, error) { return openSQL(ctx, h, queue) }
		}
	case *sql.Conn:
		if h != nil {
			return func(ctx context.Context, queue func(*pgx.Batch)) (*owned, error) { return openSQL(ctx, h, queue) }
		}
	}
	return nil
}

// openPgx begins a transaction on conn with queue's statements in BEGIN's
// round trip; release, if not nil, runs when it ends.
func openPgx(ctx context.Context, conn *pgx.Conn, queue func(*pgx.Batch), release func()) (*owned, error) {
	tx, err := txbatch.BeginBatch(ctx, conn, pgx.TxOptions{}, queue)
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
			return commitOutcome(tx.Commit(ctx))
		}
		return commitOutcome(txbatch.CommitBatch(ctx, tx, func(b *pgx.Batch) { b.Queue(store, args...) }))
	}
	return &owned{conn: pgxTx{tx}, tx: tx, folded: true, end: end}, nil
}

// openSQL begins a database/sql transaction on db, asking its connection
// to send queue's statements with BEGIN (which connections of
// txlock.OpenDB do).
func openSQL(ctx context.Context, db interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, queue func(*pgx.Batch)) (*owned, error) {
	fctx, req := txbatch.RequestBatch(ctx, queue)
	tx, err := db.BeginTx(fctx, nil)
	folded := req.Folded()
	if err != nil {
		return nil, err
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
		return commitOutcome(tx.Commit())
	}
	return &owned{conn: sqlTx{tx}, tx: tx, folded: folded, end: end}, nil
}

// commitOutcome is the error of a COMMIT sent, typed when its outcome is
// unknown (the connection lost with COMMIT in flight): an
// *lockedtx.AmbiguousCommitError, which matches txlock.ErrAmbiguousCommit.
// Otherwise the server's answer (a refused store skips the COMMIT) or a
// failure before COMMIT left says that nothing committed.
func commitOutcome(err error) error {
	if err != nil && pgerror.CommitAmbiguous(err) {
		return &lockedtx.AmbiguousCommitError{Err: err}
	}
	return err
}
