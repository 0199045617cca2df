package txlock

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The folded begin on pgx. BEGIN and the lock statements go to the server
// as one batch (pgx.Batch.BeginTx): one pipeline, one round trip, and fn
// gets pgx's own transaction. The lock statements take bind arguments, so
// they run the way the connection runs every query (its
// DefaultQueryExecMode): in pgx's default mode they are prepared once per
// connection and the server does not parse and plan them again for every
// transaction, which is most of what the lock costs an uncontended
// transaction; in the modes used behind PgBouncer in transaction mode they
// are sent unprepared, still in the same round trip.

// lockQuery is one lock statement with its bind arguments.
type lockQuery struct {
	sql  string
	args []any
}

// lockQueries builds p's lock statements: one per key, in canonical order
// (so the lock order is the statement order). With a timeout, the first
// also sets lock_timeout for the transaction (set_config(…, true) is SET
// LOCAL) from a subquery, which PostgreSQL runs before the lock call
// because it is volatile and so not pulled up. Arguments are the key's
// integers and a duration formatted here; SQL text is this package's.
func (p *plan) lockQueries() []lockQuery {
	fn := p.lockFunc()
	qs := make([]lockQuery, len(p.keys))
	for i, k := range p.keys {
		var args []any
		if p.timeout > 0 && i == 0 {
			args = append(args, strconv.FormatInt(timeoutMillis(p.timeout), 10)+"ms")
		}
		first := strconv.Itoa(len(args) + 1)
		var params string
		if a, b, ok := k.Pair(); ok {
			params = "($" + first + "::int4, $" + strconv.Itoa(len(args)+2) + "::int4)"
			args = append(args, a, b)
		} else {
			n, _ := k.Int64()
			params = "($" + first + "::int8)"
			args = append(args, n)
		}
		q := lockQuery{sql: "SELECT pg_catalog." + fn + params, args: args}
		if p.timeout > 0 && i == 0 {
			q.sql += " FROM (SELECT pg_catalog.set_config('lock_timeout', $1::text, true)) s"
		}
		qs[i] = q
	}
	return qs
}

// queryArgs is the bind arguments of p's i-th lock statement for an
// attempt whose lock_timeout is timeout: the plan's own, or, for a bound
// the caller's deadline set, a copy carrying it.
func (p *plan) queryArgs(i int, timeout time.Duration) []any {
	args := p.queries[i].args
	if i != 0 || timeout == p.timeout || p.timeout <= 0 {
		return args
	}
	args = slices.Clone(args)
	args[0] = strconv.FormatInt(timeoutMillis(timeout), 10) + "ms"
	return args
}

// errHeldElsewhere is a try-once's answer that a key is held by another
// session (pg_try_advisory_xact_lock returned false).
var errHeldElsewhere = errors.New("txlock: advisory lock held elsewhere")

// beginBatch begins a transaction with o (validated modes, no BeginQuery)
// on conn and takes a's locks in the same round trip. On failure no
// transaction is left open (abortBegin); when the caller's deadline leaves
// no time to wait (errNoTime), nothing is sent.
func beginBatch(ctx context.Context, conn *pgx.Conn, a *Attempt, o pgx.TxOptions) (pgx.Tx, error) {
	p := a.plan
	a.useConn(conn)
	if !a.bind() {
		return nil, errNoTime
	}
	b := &pgx.Batch{}
	b.BeginTx(o)
	for i, q := range p.queries {
		b.Queue(q.sql, p.queryArgs(i, a.timeout)...)
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
		return nil, err
	}
	return tx, nil
}

// abortBegin rolls back a transaction that a failed begin left open (a lock
// wait that timed out, a try-once that found a key held, a deadlock): pgx
// leaves the connection in the failed-transaction state, and a pool would
// destroy it on release. If the rollback fails, the connection is closed.
func abortBegin(ctx context.Context, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := conn.Exec(rctx, "ROLLBACK"); err != nil {
		_ = conn.Close(rctx)
	}
}

// beginLocked begins attempt a's transaction on conn. Unless the caller set
// a BeginQuery of their own (then Run sends the locks after it), the locks
// travel with BEGIN (beginBatch).
func beginLocked(ctx context.Context, conn *pgx.Conn, a *Attempt) (pgx.Tx, error) {
	o := a.cfg.pgxOpts
	if o.BeginQuery != "" || !a.state.CompareAndSwap(statePending, stateFolded) {
		a.useConn(conn)
		tx, err := conn.BeginTx(ctx, o)
		if err != nil {
			abortBegin(ctx, conn)
		}
		return tx, err
	}
	o, _ = normalPgxOptions(o) // validated by newPlan
	return beginBatch(ctx, conn, a, o)
}
