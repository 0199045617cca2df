package lockedtx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/internal/pgerror"
)

// BEGIN folding: the locks travel with BEGIN, so that a locked
// transaction costs the round trips of the same unlocked one. This file is
// the whole of it. BEGIN and the lock statements go to the server as one
// batch (pgx.Batch.BeginTx): one pipeline, one round trip, and fn gets
// pgx's own transaction. The lock statements take bind arguments, so they
// run the way the connection runs every query (its DefaultQueryExecMode):
// in pgx's default mode they are prepared once per connection and the
// server does not parse and plan them again for every transaction, which
// is most of what the lock costs an uncontended transaction; in the modes
// used behind PgBouncer in transaction mode they are sent unprepared,
// still in the same round trip.
//
// Two ways in, each reporting whether it folded:
//   - pgx (BeginPgx): the begin step holds the *pgx.Conn and sends the
//     batch itself.
//   - database/sql (BeginSQL): BEGIN is sent by the driver, whose
//     ConnBeginTx sees only a context, so the request to fold travels to
//     it in the context — the one hand-off through a context — and the
//     driver's connection (foldConn, from WrapConnector) answers in the
//     request whether it folded. Any other driver ignores the request.
//
// The request is a beginRequest: an Attempt (the locks), or a
// BatchRequest (statements another package queues with BEGIN: lease's
// guard). The connection treats both alike.

// errHeldElsewhere is a try-once's answer that a key is held by another
// session (pg_try_advisory_xact_lock returned false).
var errHeldElsewhere = errors.New("txlock: advisory lock held elsewhere")

// BeginPgx begins attempt a's transaction on conn and reports whether
// BEGIN carried the locks: it does (beginBatch) unless the caller set a
// BeginQuery of their own; then Run sends the locks after it. On failure
// no transaction is left open.
func BeginPgx(ctx context.Context, conn *pgx.Conn, a *Attempt) (tx pgx.Tx, folded bool, err error) {
	o := a.cfg.PgxOpts
	if o.BeginQuery != "" {
		a.useConn(conn)
		sent := time.Now()
		tx, err := conn.BeginTx(ctx, o)
		if err != nil {
			abortBegin(ctx, conn)
			return nil, false, err
		}
		a.begunAlone(sent)
		return tx, false, nil
	}
	o, _ = normalPgxOptions(o) // validated by newPlan
	tx, err = beginBatch(ctx, conn, a, o)
	return tx, err == nil, err
}

// beginBatch begins a transaction with o (validated modes, no BeginQuery)
// on conn and takes a's locks in the same round trip. On failure no
// transaction is left open (abortBegin); when the caller's deadline leaves
// no time to wait (errNoTime), nothing is sent.
func beginBatch(ctx context.Context, conn *pgx.Conn, a *Attempt, o pgx.TxOptions) (pgx.Tx, error) {
	a.useConn(conn)
	if !a.bind() {
		return nil, errNoTime
	}
	p := a.plan
	b := &pgx.Batch{}
	b.BeginTx(o)
	for _, q := range p.queries {
		b.Queue(q.sql, q.args...)
	}
	if err := prepareBatch(ctx, conn, b); err != nil {
		return nil, err
	}
	// Bound the wait now, when the first use of a connection has prepared
	// the statements: their round trips must not eat the deadline's
	// reserve for COMMIT.
	if !a.bind() {
		return nil, errNoTime
	}
	for i, q := range a.queries() {
		b.QueuedQueries[i+1].Arguments = q.args
	}
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	_, err := br.Exec() // BEGIN
	for i := 0; err == nil && i < len(p.queries); i++ {
		if !p.tryOnce {
			_, err = br.Exec()
			continue
		}
		var got bool
		if err = br.QueryRow().Scan(&got); err == nil && !got {
			err = errHeldElsewhere
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		abortBegin(ctx, conn)
		forgetVanished(ctx, conn, b, err)
		return nil, err
	}
	return tx, nil
}

// abortBegin rolls back a transaction that a failed begin left open (a lock
// wait that timed out, a try-once that found a key held, a deadlock): pgx
// leaves the connection in the failed-transaction state, and a pool would
// destroy it on release. If the rollback fails, the connection is closed.
//
// The ROLLBACK waits for no lock: its round trip goes into the connection's
// estimates, so that they follow the network even on a connection whose
// waits all time out (no COMMIT to measure) — one whose first round trip
// came in a stall would otherwise keep too much back for as long.
func abortBegin(ctx context.Context, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	sent := time.Now()
	if _, err := conn.Exec(rctx, "ROLLBACK"); err != nil {
		_ = conn.Close(rctx)
		return
	}
	connStateOf(conn).est.ObserveRTT(time.Since(sent))
}

// BeginSQL begins attempt a's transaction with beginTx — a database/sql
// BeginTx (*sql.DB's, *sql.Conn's, sqlx's BeginTxx, GORM's Begin) called
// with the context and options it is given — and reports whether BEGIN
// carried the locks: it does when the connection comes from WrapConnector.
func BeginSQL[T any](ctx context.Context, a *Attempt, beginTx func(context.Context, *sql.TxOptions) (T, error)) (v T, folded bool, err error) {
	v, err = beginTx(a.foldRequest(ctx), a.cfg.SQLOpts)
	return v, a.folded() && err == nil, err
}

// foldRequest returns ctx carrying a request to the connection that
// begins a's database/sql transaction to send the locks with BEGIN; the
// connection records in it whether it did, and folded reads the answer.
// database/sql may try BEGIN on more than one connection (after
// driver.ErrBadConn), one after the other: a connection takes the request
// (foldOpen → foldTaken) and gives it back if it could not fold. The
// request lives in the attempt (one BEGIN per attempt).
func (a *Attempt) foldRequest(ctx context.Context) context.Context {
	a.fold.Store(foldOpen)
	return context.WithValue(ctx, foldRequestKey{}, beginRequest(a))
}

// folded closes a's request — so that a later BeginTx on a context derived
// from it (GORM keeps it in the transaction) cannot take it up — and
// reports whether a connection folded the locks into BEGIN.
func (a *Attempt) folded() bool { return a.fold.Swap(foldClosed) == foldDone }

func (a *Attempt) foldState() *atomic.Int32 { return &a.fold }

func (a *Attempt) beginFolded(ctx context.Context, conn *pgx.Conn, o pgx.TxOptions) (pgx.Tx, error) {
	return beginBatch(ctx, conn, a, o)
}

// beginRequest is a request, carried in the context of a database/sql
// BeginTx, that the connection send statements in BEGIN's round trip.
type beginRequest interface {
	// foldState is the request's state: foldOpen, foldTaken, foldDone,
	// foldClosed.
	foldState() *atomic.Int32
	// beginFolded begins a transaction with o on conn, with the
	// statements, in one round trip; on failure no transaction is left
	// open.
	beginFolded(ctx context.Context, conn *pgx.Conn, o pgx.TxOptions) (pgx.Tx, error)
}

// BatchRequest is a request that a connection of WrapConnector send the
// statements queue adds to a pgx batch in BEGIN's round trip: the batch
// BEGIN, queue's statements, and the results read by the callbacks queue
// set (QueuedQuery.QueryRow, Exec). An error from one of them fails the
// BEGIN with that error, the transaction rolled back. Statements queued
// with CommitWith travel with the transaction's COMMIT the same way.
type BatchRequest struct {
	queue  func(*pgx.Batch)
	fold   atomic.Int32
	commit atomic.Pointer[func(*pgx.Batch)]
}

// RequestBatch returns ctx carrying a BatchRequest for queue, for one
// database/sql BeginTx; Folded then says whether BEGIN carried the
// statements. A driver that does not fold ignores the request.
func RequestBatch(ctx context.Context, queue func(*pgx.Batch)) (context.Context, *BatchRequest) {
	r := &BatchRequest{queue: queue}
	return context.WithValue(ctx, foldRequestKey{}, beginRequest(r)), r
}

// Folded closes the request, as Attempt.folded does, and reports whether
// a connection sent the statements with BEGIN.
func (r *BatchRequest) Folded() bool { return r.fold.Swap(foldClosed) == foldDone }

// CommitWith asks the connection that folded the request (Folded
// reported true) to send the statements queue adds to a pgx batch before
// COMMIT, in COMMIT's round trip (CommitBatch), when the *sql.Tx it began
// is committed. Call it before Commit; a later call replaces queue.
func (r *BatchRequest) CommitWith(queue func(*pgx.Batch)) { r.commit.Store(&queue) }

func (r *BatchRequest) foldState() *atomic.Int32 { return &r.fold }

func (r *BatchRequest) beginFolded(ctx context.Context, conn *pgx.Conn, o pgx.TxOptions) (pgx.Tx, error) {
	return BeginBatch(ctx, conn, o, r.queue)
}

func (r *BatchRequest) commitQueue() func(*pgx.Batch) {
	if q := r.commit.Load(); q != nil {
		return *q
	}
	return nil
}

// BeginBatch begins a transaction with o on conn and sends the statements
// queue adds to the batch in the same round trip; their results are read
// by the callbacks queue set (QueuedQuery.QueryRow, Exec), before
// BeginBatch returns. If BEGIN, a statement or a callback fails, no
// transaction is left open and the error is returned.
//
// Statements queued with Ahead run before BEGIN; if one of them fails,
// BeginBatch returns its error with the connection idle. Its statements
// are prepared by name (prepareBatch).
func BeginBatch(ctx context.Context, conn *pgx.Conn, o pgx.TxOptions, queue func(*pgx.Batch)) (pgx.Tx, error) {
	b := &pgx.Batch{}
	b.BeginTx(o)
	begin := b.QueuedQueries[0]
	queue(b)
	if b.QueuedQueries[0] != begin && (o.IsoLevel != "" || o.DeferrableMode != "") {
		return nil, errAheadOfModes
	}
	if err := prepareBatch(ctx, conn, b); err != nil {
		return nil, err
	}
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		abortBegin(ctx, conn)
		forgetVanished(ctx, conn, b, err)
		return nil, err
	}
	return tx, nil
}

// errAheadOfModes refuses a BeginBatch with statements ahead of a BEGIN
// that sets an isolation level or DEFERRABLE (see Ahead): nothing is sent.
var errAheadOfModes = errors.New("lockedtx: statements ahead of a BEGIN that sets an isolation level or DEFERRABLE")

// Ahead queues the statements queue adds to b — a batch of BeginBatch,
// whose first statement is BEGIN — ahead of BEGIN, in the order queued.
//
// They run in the implicit transaction that the server opens for a
// pipeline and that BEGIN then makes explicit; so they must be reads that
// take no locks, and the transaction must not set an isolation level or
// DEFERRABLE (PostgreSQL refuses those once a statement has taken a
// snapshot). What they are for is their failure: if one of them fails, the
// server skips BEGIN and every statement after it, and rolls the implicit
// transaction back at the Sync that ends the batch. A statement ahead of
// BEGIN that fails on purpose thus answers a request in one round trip and
// leaves the connection idle, with no transaction to end (idem's replay of
// a recorded key).
func Ahead(b *pgx.Batch, queue func(*pgx.Batch)) {
	n := len(b.QueuedQueries)
	queue(b)
	added := slices.Clone(b.QueuedQueries[n:])
	b.QueuedQueries = append(added, b.QueuedQueries[:n]...)
}

// prepareBatch prepares, on a connection in pgx's default mode
// (QueryExecModeCacheStatement), each statement of b that is not prepared
// yet, once per connection, with its own SQL as its name. The reason is
// failure: a batch that fails makes pgx evict every statement of it from
// the connection's statement cache, and the next batch then spends two
// round trips, one to deallocate them and one to prepare them again. BEGIN
// batches fail as part of their job — a lock wait that timed out, a lease
// guard that refused, idem's replay answered ahead of BEGIN — and
// statements prepared by name are not evicted. The statements are this
// package's and its callers' own, a few per connection. In the other modes
// statements are not cached, or (QueryExecModeCacheDescribe) their
// descriptions are, and a failed batch costs the next one a describe.
//
// The first batch prepared on a connection measures a round trip: its first
// statement is not prepared yet (none of this package's names is), so its
// Prepare is one round trip that waits for no lock. It seeds the
// connection's estimates, so that a deadline-bound wait on a connection
// that has not yet seen a hold keeps 3.5 round trips back (waitbound)
// rather than only the cold reserve, which over a slow network would have
// the 55P03 arrive after the deadline.
func prepareBatch(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) error {
	st := connStateOf(conn)
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
			st.est.ObserveRTT(time.Since(sent))
		}
	}
	return nil
}

// forgetVanished makes conn forget b's statements prepared by name when
// err says one of them no longer exists on the server (SQLSTATE 26000: a
// DEALLOCATE ALL or DISCARD ALL run on the session): pgx would otherwise
// keep binding the missing name, and every later batch would fail the same
// way. The next batch prepares them again.
func forgetVanished(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, err error) {
	if pgerror.Code(err) != pgerror.InvalidStatementName || conn.IsClosed() {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
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
// the outcome unknown (pgerr.CommitAmbiguous).
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
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = tx.Rollback(rctx) // closes the connection if it fails
	}
	return err
}

const (
	foldOpen   int32 = iota // no connection has folded the locks
	foldTaken               // a connection is folding them
	foldDone                // BEGIN carried the locks
	foldClosed              // the request is answered
)

type foldRequestKey struct{}

// WrapConnector wraps a connector of pgx's stdlib driver so that its
// connections fold: see package txlock's WrapConnector.
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
// open fold request, sends BEGIN and the lock statements as one batch.
type foldConn struct{ *stdConn }

func (c *foldConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	r, _ := ctx.Value(foldRequestKey{}).(beginRequest)
	if r == nil {
		return c.stdConn.BeginTx(ctx, opts)
	}
	state := r.foldState()
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
	tx, err := r.beginFolded(ctx, conn, keywordOptions(iso, access, "", ""))
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
// COMMIT carries the statements the request queued for it (CommitWith).
type foldTx struct {
	ctx context.Context
	tx  pgx.Tx
	r   beginRequest
}

func (t foldTx) Commit() error {
	if c, ok := t.r.(interface{ commitQueue() func(*pgx.Batch) }); ok {
		if q := c.commitQueue(); q != nil {
			return CommitBatch(t.ctx, t.tx, q)
		}
	}
	return t.tx.Commit(t.ctx)
}

func (t foldTx) Rollback() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), cleanupTimeout)
	defer cancel()
	return t.tx.Rollback(ctx)
}

// normalPgxOptions is o with its modes checked (pgxModes) and spelled as
// pgx's constants, and no BeginQuery.
func normalPgxOptions(o pgx.TxOptions) (pgx.TxOptions, error) {
	iso, access, deferrable, err := pgxModes(o)
	if err != nil {
		return pgx.TxOptions{}, err
	}
	return keywordOptions(iso, access, deferrable, o.CommitQuery), nil
}

// keywordOptions turns BEGIN keywords (from pgxModes or sqlIsolation) into
// pgx options: pgx's constants are the keywords in lower case.
func keywordOptions(iso, access, deferrable, commitQuery string) pgx.TxOptions {
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
