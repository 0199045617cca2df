package txbatch

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// The database/sql way in: BEGIN is sent by the driver, whose ConnBeginTx
// sees only a context, so the request to send statements with it travels
// to it in the context — the one hand-off through a context — and the
// driver's connection (foldConn, from WrapConnector) answers in the
// request whether it did. Any other driver ignores the request.

// Request is a request, carried in the context of a database/sql BeginTx
// (WithRequest), that the connection send statements in BEGIN's round
// trip: lockedtx's attempt (its locks), or a BatchRequest.
type Request interface {
	// Fold is the request's state.
	Fold() *Fold
	// BeginFolded begins a transaction with o on conn, with the
	// statements, in one round trip; on failure no transaction is left
	// open.
	BeginFolded(ctx context.Context, conn *pgx.Conn, o pgx.TxOptions) (pgx.Tx, error)
}

// Fold is the state of one Request. database/sql may try BEGIN on more
// than one connection (after driver.ErrBadConn), one after the other: a
// connection takes the request and gives it back if it could not fold.
// The zero Fold is open.
type Fold struct{ state atomic.Int32 }

const (
	foldOpen   int32 = iota // no connection has sent the statements
	foldTaken               // a connection is sending them
	foldDone                // BEGIN carried them
	foldClosed              // the request is answered
)

// Open makes f open again, for a new BeginTx.
func (f *Fold) Open() { f.state.Store(foldOpen) }

// Close closes f — so that a later BeginTx on a context derived from the
// request's (GORM keeps it in the transaction) cannot take it up — and
// reports whether a connection sent the statements with BEGIN.
func (f *Fold) Close() bool { return f.state.Swap(foldClosed) == foldDone }

type requestKey struct{}

// WithRequest returns ctx carrying r, for one database/sql BeginTx.
func WithRequest(ctx context.Context, r Request) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// BatchRequest is a request that a connection of WrapConnector send the
// statements queue adds to a pgx batch in BEGIN's round trip: the batch
// BEGIN, queue's statements, and the results read by the callbacks queue
// set (QueuedQuery.QueryRow, Exec). An error from one of them fails the
// BEGIN with that error, the transaction rolled back. Statements queued
// with CommitWith travel with the transaction's COMMIT the same way.
type BatchRequest struct {
	queue  func(*pgx.Batch)
	fold   Fold
	commit atomic.Pointer[func(*pgx.Batch)]
}

// RequestBatch returns ctx carrying a BatchRequest for queue, for one
// database/sql BeginTx; Folded then says whether BEGIN carried the
// statements. A driver that does not fold ignores the request.
func RequestBatch(ctx context.Context, queue func(*pgx.Batch)) (context.Context, *BatchRequest) {
	r := &BatchRequest{queue: queue}
	return WithRequest(ctx, r), r
}

// Folded closes the request (Fold.Close) and reports whether a
// connection sent the statements with BEGIN.
func (r *BatchRequest) Folded() bool { return r.fold.Close() }

// CommitWith asks the connection that folded the request (Folded
// reported true) to send the statements queue adds to a pgx batch before
// COMMIT, in COMMIT's round trip (CommitBatch), when the *sql.Tx it began
// is committed. Call it before Commit; a later call replaces queue.
func (r *BatchRequest) CommitWith(queue func(*pgx.Batch)) { r.commit.Store(&queue) }

// Fold is the request's state.
func (r *BatchRequest) Fold() *Fold { return &r.fold }

// BeginFolded is BeginBatch with the request's statements.
func (r *BatchRequest) BeginFolded(ctx context.Context, conn *pgx.Conn, o pgx.TxOptions) (pgx.Tx, error) {
	return BeginBatch(ctx, conn, o, r.queue)
}

func (r *BatchRequest) commitQueue() func(*pgx.Batch) {
	if q := r.commit.Load(); q != nil {
		return *q
	}
	return nil
}

// WrapConnector wraps a connector of pgx's stdlib driver so that its
// connections send a Request's statements with BEGIN: see package
// txlock's WrapConnector.
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
// it promoted, Conn() included) whose BeginTx, given a context carrying an
// open Request, sends BEGIN and the request's statements as one batch.
type foldConn struct{ *stdConn }

func (c *foldConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	r, _ := ctx.Value(requestKey{}).(Request)
	if r == nil {
		return c.stdConn.BeginTx(ctx, opts)
	}
	state := &r.Fold().state
	iso, ok := sqlIsolation(opts.Isolation)
	if !ok || !state.CompareAndSwap(foldOpen, foldTaken) {
		return c.stdConn.BeginTx(ctx, opts) // the driver's own error for an unknown level
	}
	conn := c.Conn()
	if conn.IsClosed() {
		state.Store(foldOpen)
		return nil, driver.ErrBadConn
	}
	access := ""
	if opts.ReadOnly {
		access = "READ ONLY"
	}
	tx, err := r.BeginFolded(ctx, conn, KeywordOptions(iso, access, "", ""))
	if err != nil {
		state.Store(foldOpen)
		if pgconn.SafeToRetry(err) {
			return nil, driver.ErrBadConn // nothing was sent: database/sql may try another connection
		}
		return nil, err
	}
	state.Store(foldDone)
	return foldTx{ctx, tx, r}, nil
}

// foldTx is stdlib's transaction wrapper, except that ROLLBACK runs on a
// context detached from the caller's cancellation, so that a cancelled
// caller's connection is rolled back and kept rather than closed, and that
// COMMIT carries the statements a BatchRequest queued for it (CommitWith).
type foldTx struct {
	ctx context.Context
	tx  pgx.Tx
	r   Request
}

func (t foldTx) Commit() error {
	if br, ok := t.r.(*BatchRequest); ok {
		if q := br.commitQueue(); q != nil {
			return CommitBatch(t.ctx, t.tx, q)
		}
	}
	return t.tx.Commit(t.ctx)
}

func (t foldTx) Rollback() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), CleanupTimeout)
	defer cancel()
	return t.tx.Rollback(ctx)
}

// KeywordOptions turns BEGIN keywords (from sqlIsolation, or lockedtx's
// checked pgx modes) into pgx options: pgx's constants are the keywords
// in lower case.
func KeywordOptions(iso, access, deferrable, commitQuery string) pgx.TxOptions {
	return pgx.TxOptions{
		IsoLevel:       pgx.TxIsoLevel(strings.ToLower(iso)),
		AccessMode:     pgx.TxAccessMode(strings.ToLower(access)),
		DeferrableMode: pgx.TxDeferrableMode(strings.ToLower(deferrable)),
		CommitQuery:    commitQuery,
	}
}

// sqlIsolation maps a database/sql isolation level as pgx's stdlib driver
// does; ok is false for levels PostgreSQL has no name for.
func sqlIsolation(l driver.IsolationLevel) (iso string, ok bool) {
	switch sql.IsolationLevel(l) {
	case sql.LevelDefault:
		return "", true
	case sql.LevelReadUncommitted:
		return "READ UNCOMMITTED", true
	case sql.LevelReadCommitted:
		return "READ COMMITTED", true
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		return "REPEATABLE READ", true
	case sql.LevelSerializable:
		return "SERIALIZABLE", true
	}
	return "", false
}
