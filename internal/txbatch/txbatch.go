// Package txbatch sends statements in the round trips a transaction makes
// anyway: with BEGIN (BeginBatch; Ahead for statements before it) and
// with COMMIT (CommitBatch), on a *pgx.Conn, and through database/sql on
// the connections of WrapConnector, whose BeginTx takes a Request from
// its context. internal/lockedtx sends its lock statements with BEGIN
// this way; lease sends its guard (RequestBatch), idem its claim and
// result.
//
// Statements sent with BEGIN are prepared by name once per connection
// (Prepare), because such batches fail as part of their job (a lock wait
// that timed out, a guard that refused, a replay answered ahead of BEGIN),
// and pgx evicts every statement of a failed batch from its cache.
package txbatch

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/waitbound"
)

// CleanupTimeout bounds a ROLLBACK sent after a failure. It runs on a
// context detached from the caller's cancellation, so a cancelled caller
// still gets a clean rollback and keeps the connection.
const CleanupTimeout = 5 * time.Second

// ConnState is what sqlock keeps with a pgx connection. It lives in the
// connection's pgconn CustomData, used by the goroutine that holds the
// connection: no package state, and it goes when the connection does.
type ConnState struct {
	// cachesStatements: the connection runs in pgx's default mode,
	// QueryExecModeCacheStatement (Prepare). Kept here because
	// conn.Config() copies the whole configuration on every call, the
	// largest client cost of a locked transaction when it was called for
	// each one.
	cachesStatements bool
	// prepared: a batch was prepared on the connection, the first of
	// which measured a round trip into Est (Prepare).
	prepared bool
	// Est is the round-trip and hold estimates that bound a
	// deadline-bound lock wait on the connection (lockedtx). Unlike the
	// fields above it is safe for concurrent use: an attempt feeds it
	// after COMMIT, when the connection may be back in its pool.
	Est waitbound.Estimates
}

// connStateKey is the key of a connection's ConnState in CustomData.
const connStateKey = "github.com/sqlock/sqlock/txlock.conn"

// StateOf returns c's ConnState, made on first use.
func StateOf(c *pgx.Conn) *ConnState {
	m := c.PgConn().CustomData()
	st, _ := m[connStateKey].(*ConnState)
	if st == nil {
		st = &ConnState{cachesStatements: c.Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement}
		m[connStateKey] = st
	}
	return st
}

// BeginBatch begins a transaction with o on conn and sends the statements
// queue adds to the batch in the same round trip; their results are read
// by the callbacks queue set (QueuedQuery.QueryRow, Exec), before
// BeginBatch returns. If BEGIN, a statement or a callback fails, no
// transaction is left open and the error is returned.
//
// Statements queued with Ahead run before BEGIN, which is then sent READ
// WRITE; if one of them fails or stops BEGIN (StopBegin), BeginBatch
// returns the error with the connection idle. Its statements are prepared
// by name (Prepare).
func BeginBatch(ctx context.Context, conn *pgx.Conn, o pgx.TxOptions, queue func(*pgx.Batch)) (pgx.Tx, error) {
	b := &pgx.Batch{}
	b.BeginTx(o)
	begin := b.QueuedQueries[0]
	queue(b)
	if b.QueuedQueries[0] != begin {
		if o.IsoLevel != "" || o.DeferrableMode != "" || o.AccessMode != "" || o.BeginQuery != "" {
			return nil, errAheadOfModes
		}
		begin.SQL = beginReadWrite
	}
	if err := Prepare(ctx, conn, b); err != nil {
		return nil, err
	}
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		AbortBegin(ctx, conn)
		ForgetVanished(ctx, conn, b, err)
		return nil, err
	}
	return tx, nil
}

// errAheadOfModes refuses a BeginBatch with statements ahead of a BEGIN
// that sets modes of its own (see Ahead): nothing is sent.
var errAheadOfModes = errors.New("txbatch: statements ahead of a BEGIN that sets an isolation level, an access mode or DEFERRABLE")

// beginReadWrite is the BEGIN of a batch with statements ahead of it:
// READ WRITE is what StopBegin makes fail. (The server's default access
// mode is READ WRITE unless default_transaction_read_only says otherwise,
// and then the statements ahead, run under that default, could not have
// written anything the transaction keeps.)
const beginReadWrite = "BEGIN READ WRITE"

// Ahead queues the statements queue adds to b — a batch of BeginBatch,
// whose first statement is BEGIN — ahead of BEGIN, in the order queued.
//
// They run in the implicit transaction that the server opens for a
// pipeline and that BEGIN then makes explicit: what they write and lock
// belongs to the transaction BeginBatch returns and ends with it. The
// transaction sets no mode of its own (PostgreSQL refuses an isolation
// level or DEFERRABLE once a statement has taken a snapshot, and BEGIN is
// sent READ WRITE). What they gain is a way to end the batch before BEGIN:
// if one of them fails, or calls StopBegin, the server skips BEGIN and
// every statement after it, and rolls the implicit transaction back at
// the Sync that ends the batch — the request is answered in one round trip
// and the connection is idle, with no transaction to end (idem's replay of
// a recorded key).
func Ahead(b *pgx.Batch, queue func(*pgx.Batch)) {
	n := len(b.QueuedQueries)
	queue(b)
	added := slices.Clone(b.QueuedQueries[n:])
	b.QueuedQueries = append(added, b.QueuedQueries[:n]...)
}

// StopBegin is an SQL expression for a statement queued with Ahead that
// stops BEGIN once the statement has completed, its rows sent: it makes
// the implicit transaction read only, and BEGIN READ WRITE after a
// statement fails (SQLSTATE 25001, Stopped). A failure of the statement
// itself cannot keep its rows when it writes: a statement with a
// data-modifying CTE runs to completion before it sends a row, so an error
// in it discards them all.
const StopBegin = `pg_catalog.set_config('transaction_read_only', 'on', true)`

// Stopped reports whether err, BeginBatch's, is a BEGIN that a statement
// ahead of it stopped with StopBegin.
func Stopped(err error) bool { return pgerror.Code(err) == pgerror.ActiveSQLTransaction }

// AbortBegin rolls back a transaction that a failed begin left open (a
// lock wait that timed out, a try-once that found a key held, a guard that
// refused): pgx leaves the connection in the failed-transaction state, and
// a pool would destroy it on release. If the rollback fails, the
// connection is closed.
//
// The ROLLBACK waits for no lock: its round trip goes into the connection's
// estimates, so that they follow the network even on a connection whose
// waits all time out (no COMMIT to measure) — one whose first round trip
// came in a stall would otherwise keep too much back for as long.
func AbortBegin(ctx context.Context, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	sent := time.Now()
	if _, err := conn.Exec(rctx, "ROLLBACK"); err != nil {
		_ = conn.Close(rctx)
		return
	}
	StateOf(conn).Est.ObserveRTT(time.Since(sent))
}

// Prepare prepares, on a connection in pgx's default mode
// (QueryExecModeCacheStatement), each statement of b that is not prepared
// yet, once per connection, with its own SQL as its name. The reason is
// failure: a batch that fails makes pgx evict every statement of it from
// the connection's statement cache, and the next batch then spends two
// round trips, one to deallocate them and one to prepare them again. BEGIN
// batches fail as part of their job — a lock wait that timed out, a lease
// guard that refused, idem's replay answered ahead of BEGIN — and
// statements prepared by name are not evicted. The statements are
// sqlock's own, a few per connection. In the other modes statements are
// not cached, or (QueryExecModeCacheDescribe) their descriptions are, and
// a failed batch costs the next one a describe.
//
// The first batch prepared on a connection measures a round trip: its first
// statement is not prepared yet (none of sqlock's names is), so its
// Prepare is one round trip that waits for no lock. It seeds the
// connection's estimates, so that a deadline-bound wait on a connection
// that has not yet seen a hold keeps 3.5 round trips back (waitbound)
// rather than only the cold reserve, which over a slow network would have
// the 55P03 arrive after the deadline.
func Prepare(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) error {
	st := StateOf(conn)
	if !st.cachesStatements {
		return nil
	}
	measure := !st.prepared
	st.prepared = true
	for i, q := range b.QueuedQueries {
		sent := time.Now()
		if _, err := conn.Prepare(ctx, q.SQL, q.SQL); err != nil {
			return err
		}
		if measure && i == 0 {
			st.Est.ObserveRTT(time.Since(sent))
		}
	}
	return nil
}

// ForgetVanished makes conn forget b's statements prepared by name when
// err says one of them no longer exists on the server (SQLSTATE 26000: a
// DEALLOCATE ALL or DISCARD ALL run on the session): pgx would otherwise
// keep binding the missing name, and every later batch would fail the same
// way. The next batch prepares them again.
func ForgetVanished(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, err error) {
	if pgerror.Code(err) != pgerror.InvalidStatementName || conn.IsClosed() {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	for _, q := range b.QueuedQueries {
		_ = conn.Deallocate(rctx, q.SQL) // succeeds for a name the server no longer has
	}
}

// CommitBatch sends the statements queue adds to a pgx batch and COMMIT,
// in one round trip, to end tx (its callbacks, if queue set any, run
// before CommitBatch returns). The batch is one pipeline with one Sync:
// if a statement fails, the server skips the rest, COMMIT included, and
// CommitBatch rolls tx back and returns the statement's error — what the
// transaction wrote never commits without the queued statements. A COMMIT
// answered ROLLBACK (a transaction already aborted) is
// pgx.ErrTxCommitRollback. Any other error (the connection lost) leaves
// the outcome unknown (pgerror.CommitAmbiguous).
//
// On success the connection is outside a transaction but pgx's tx is not
// marked closed (pgx has no way to say it was committed by a batch): the
// caller must not use tx again.
func CommitBatch(ctx context.Context, tx pgx.Tx, queue func(*pgx.Batch)) error {
	b := &pgx.Batch{}
	queue(b)
	var tag pgconn.CommandTag
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	conn := tx.Conn()
	err := tx.SendBatch(ctx, b).Close()
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	if err != nil && !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
		defer cancel()
		_ = tx.Rollback(rctx) // closes the connection if it fails
	}
	return err
}
