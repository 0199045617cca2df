package lockedtx

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/txbatch"
)

// BEGIN folding: the locks travel with BEGIN, so that a locked
// transaction costs the round trips of the same unlocked one. BEGIN and
// the lock statements go to the server as one batch (pgx.Batch.BeginTx):
// one pipeline, one round trip, and fn gets pgx's own transaction. The
// lock statements take bind arguments, so they run the way the connection
// runs every query (its DefaultQueryExecMode): in pgx's default mode they
// are prepared once per connection (txbatch.Prepare) and the server does
// not parse and plan them again for every transaction, which is most of
// what the lock costs an uncontended transaction; in the modes used behind
// PgBouncer in transaction mode they are sent unprepared, still in the
// same round trip.
//
// Two ways in, each reporting whether it folded:
//   - pgx (BeginPgx): the begin step holds the *pgx.Conn and sends the
//     batch itself.
//   - database/sql (BeginSQL): the attempt is a txbatch.Request, carried
//     in the context to the driver's connection (txbatch.WrapConnector),
//     which answers in it whether it folded.

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
		if err := a.runsOn(conn); err != nil {
			return nil, false, err
		}
		a.useConn(conn)
		sent := time.Now()
		tx, err := conn.BeginTx(ctx, o)
		if err != nil {
			a.settle()
			txbatch.AbortBegin(ctx, conn)
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
	if err := a.runsOn(conn); err != nil {
		return nil, err
	}
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
	if err := txbatch.Prepare(ctx, conn, b); err != nil {
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
		a.settle() // no cancel request may reach the ROLLBACK
		txbatch.AbortBegin(ctx, conn)
		txbatch.ForgetVanished(ctx, conn, b, err)
		return nil, err
	}
	return tx, nil
}

// BeginSQL begins attempt a's transaction with beginTx — a database/sql
// BeginTx (*sql.DB's, *sql.Conn's, sqlx's BeginTxx, GORM's Begin) called
// with the context and options it is given — and reports whether BEGIN
// carried the locks: it does when the connection comes from WrapConnector.
func BeginSQL[T any](ctx context.Context, a *Attempt, beginTx func(context.Context, *sql.TxOptions) (T, error)) (v T, folded bool, err error) {
	v, err = beginTx(a.foldRequest(ctx), a.cfg.SQLOpts)
	return v, a.folded() && err == nil, err
}

// foldRequest returns ctx carrying a request (txbatch.Request) to the
// connection that begins a's database/sql transaction to send the locks
// with BEGIN; the connection records in it whether it did, and folded
// reads the answer. The request lives in the attempt (one BEGIN per
// attempt).
func (a *Attempt) foldRequest(ctx context.Context) context.Context {
	a.fold.Open()
	return txbatch.WithRequest(ctx, a)
}

// folded closes a's request and reports whether a connection folded the
// locks into BEGIN.
func (a *Attempt) folded() bool { return a.fold.Close() }

// Fold is the state of a's request to fold its locks into a database/sql
// BEGIN (txbatch.Request).
func (a *Attempt) Fold() *txbatch.Fold { return &a.fold }

// BeginFolded begins a's transaction with o on conn, the locks in BEGIN's
// round trip (txbatch.Request).
func (a *Attempt) BeginFolded(ctx context.Context, conn *pgx.Conn, o pgx.TxOptions) (pgx.Tx, error) {
	return beginBatch(ctx, conn, a, o)
}

// normalPgxOptions is o with its modes checked (pgxModes) and spelled as
// pgx's constants, and no BeginQuery.
func normalPgxOptions(o pgx.TxOptions) (pgx.TxOptions, error) {
	iso, access, deferrable, err := pgxModes(o)
	if err != nil {
		return pgx.TxOptions{}, err
	}
	return txbatch.KeywordOptions(iso, access, deferrable, o.CommitQuery), nil
}
