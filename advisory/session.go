package advisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/internal/pgcancel"
)

// A backend hands out pinned connections: *sql.DB (any PostgreSQL driver)
// or *pgxpool.Pool.
type backend interface {
	conn(ctx context.Context) (session, error)
	// maxConns is the pool's connection limit, 0 for none.
	maxConns() int
	// connsInUse is how many of the pool's connections are out of it.
	connsInUse() int
	// handle is the pool itself, which identifies the database for
	// package holds.
	handle() any
}

// A session is one pinned connection, used by one goroutine at a time.
//
// Statements run under ctx and, when deadline is not zero, end by then: a
// statement cut short by either leaves the connection in doubt, and the
// caller destroys it. The package's own bounds (wait, unlock, keepalive)
// travel as deadline rather than as a context derived from ctx: on pgx
// they become the connection's read deadline, so that a statement under a
// context that cannot end (context.Background, context.WithoutCancel) is
// not watched at all — pgx registers a callback on every cancellable
// context per statement, which costs more than the deadline on the
// lock-and-unlock path.
type session interface {
	queryRow(ctx context.Context, deadline time.Time, query string, args []any, dest ...any) error
	// exec runs query without arguments, which both drivers send with the
	// simple query protocol (so it may hold several statements).
	exec(ctx context.Context, deadline time.Time, query string) error
	// wait runs query like exec: a wait for a lock, which the server's
	// lock_timeout bounds. On pgx, ctx's cancellation does not cut it: a
	// cancel request asks the server to end the wait, and the statement's
	// own answer (57014, or whatever came first) is returned, with the
	// answer to the request bounded by grace. requested reports that the
	// request went out. Other drivers cut the statement on cancellation
	// (requested is then false).
	wait(ctx context.Context, deadline time.Time, grace time.Duration, query string) (requested bool, err error)
	// release returns the connection to the pool. Only after a confirmed
	// clean state: it holds no advisory lock of ours.
	release()
	// destroy closes the physical connection, which ends the server
	// session and with it every session lock it holds.
	destroy()
}

// destroyTimeout bounds the Terminate message sent when closing a
// connection.
const destroyTimeout = 5 * time.Second

type sqlBackend struct {
	db *sql.DB
	// pgx: the driver is pgx's stdlib, so statements can run on the
	// *pgx.Conn underneath (through Conn.Raw). database/sql watches the
	// context of every query with a goroutine of its own; pgx does not,
	// which makes a lock cycle markedly cheaper.
	pgx bool
}

func newSQLBackend(db *sql.DB) sqlBackend {
	_, isPgx := db.Driver().(*stdlib.Driver)
	return sqlBackend{db: db, pgx: isPgx}
}

func (b sqlBackend) conn(ctx context.Context) (session, error) {
	c, err := b.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if b.pgx {
		return sqlPgxSession{sqlSession{c}}, nil
	}
	return sqlSession{c}, nil
}

func (b sqlBackend) maxConns() int   { return b.db.Stats().MaxOpenConnections }
func (b sqlBackend) connsInUse() int { return b.db.Stats().InUse }
func (b sqlBackend) handle() any     { return b.db }

// sqlSession runs statements through database/sql, for any driver.
type sqlSession struct{ c *sql.Conn }

func (s sqlSession) queryRow(ctx context.Context, deadline time.Time, query string, args []any, dest ...any) error {
	ctx, cancel := withContextDeadline(ctx, deadline)
	defer cancel()
	return s.c.QueryRowContext(ctx, query, args...).Scan(dest...)
}

func (s sqlSession) exec(ctx context.Context, deadline time.Time, query string) error {
	ctx, cancel := withContextDeadline(ctx, deadline)
	defer cancel()
	_, err := s.c.ExecContext(ctx, query)
	return err
}

func (s sqlSession) wait(ctx context.Context, deadline time.Time, _ time.Duration, query string) (bool, error) {
	return false, s.exec(ctx, deadline, query)
}

// withContextDeadline is how sqlSession bounds a statement: a context
// deadline (database/sql watches every context anyway); none when deadline
// is zero.
func withContextDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

func (s sqlSession) release() { s.c.Close() }

// destroy: returning driver.ErrBadConn from Raw makes database/sql close the
// driver connection instead of pooling it. If the Conn is already done
// (database/sql discarded it after a driver.ErrBadConn), the physical
// connection is already closed.
func (s sqlSession) destroy() {
	s.c.Raw(func(any) error { return driver.ErrBadConn })
	s.c.Close()
}

// sqlPgxSession runs statements on the *pgx.Conn under a database/sql
// connection of pgx's stdlib driver. An error that leaves the pgx
// connection closed is reported to database/sql as driver.ErrBadConn, so it
// discards the connection. The driver connection is reached through its
// Conn method, which *stdlib.Conn has and so do wrappers of it
// (txlock.OpenDB's); a connector whose connections have no such method
// gets plain database/sql statements.
type sqlPgxSession struct{ sqlSession }

// pgxConner is a driver connection with the *pgx.Conn underneath.
type pgxConner interface{ Conn() *pgx.Conn }

// run runs f on the *pgx.Conn; ok is false, and f did not run, when the
// driver connection does not expose one.
func (s sqlPgxSession) run(deadline time.Time, f func(*pgx.Conn) error) (ok bool, _ error) {
	var ferr error
	err := s.c.Raw(func(dc any) error {
		pcr, isPgx := dc.(pgxConner)
		if !isPgx {
			return nil
		}
		ok = true
		pc := pcr.Conn()
		ferr = withDeadline(pc, deadline, func() error { return f(pc) })
		if ferr != nil && pc.IsClosed() {
			return driver.ErrBadConn
		}
		return nil
	})
	if ferr != nil {
		return ok, ferr
	}
	return ok, err
}

// release clears the deadline the last statement left, then returns the
// connection to the pool (or destroys it if that failed).
func (s sqlPgxSession) release() {
	cleared := true
	s.c.Raw(func(dc any) error {
		if pcr, ok := dc.(pgxConner); ok {
			cleared = clearDeadline(pcr.Conn())
		}
		return nil
	})
	if !cleared {
		s.destroy()
		return
	}
	s.sqlSession.release()
}

func (s sqlPgxSession) queryRow(ctx context.Context, deadline time.Time, query string, args []any, dest ...any) error {
	ok, err := s.run(deadline, func(c *pgx.Conn) error { return c.QueryRow(ctx, query, args...).Scan(dest...) })
	if !ok && err == nil {
		return s.sqlSession.queryRow(ctx, deadline, query, args, dest...)
	}
	return err
}

func (s sqlPgxSession) exec(ctx context.Context, deadline time.Time, query string) error {
	ok, err := s.run(deadline, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, query)
		return err
	})
	if !ok && err == nil {
		return s.sqlSession.exec(ctx, deadline, query)
	}
	return err
}

func (s sqlPgxSession) wait(ctx context.Context, deadline time.Time, grace time.Duration, query string) (requested bool, err error) {
	ok, err := s.run(deadline, func(c *pgx.Conn) error {
		var werr error
		requested, werr = waitWithCancelRequest(ctx, c, grace, query)
		return werr
	})
	if !ok && err == nil {
		return false, s.sqlSession.exec(ctx, deadline, query)
	}
	return requested, err
}

type pgxBackend struct{ p *pgxpool.Pool }

func (b pgxBackend) conn(ctx context.Context) (session, error) {
	c, err := b.p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return pgxSession{c}, nil
}

func (b pgxBackend) maxConns() int   { return int(b.p.Config().MaxConns) }
func (b pgxBackend) connsInUse() int { return int(b.p.Stat().AcquiredConns()) }
func (b pgxBackend) handle() any     { return b.p }

type pgxSession struct{ c *pgxpool.Conn }

func (s pgxSession) queryRow(ctx context.Context, deadline time.Time, query string, args []any, dest ...any) error {
	c := s.c.Conn()
	return withDeadline(c, deadline, func() error { return c.QueryRow(ctx, query, args...).Scan(dest...) })
}

func (s pgxSession) exec(ctx context.Context, deadline time.Time, query string) error {
	c := s.c.Conn()
	return withDeadline(c, deadline, func() error {
		_, err := c.Exec(ctx, query)
		return err
	})
}

func (s pgxSession) wait(ctx context.Context, deadline time.Time, grace time.Duration, query string) (bool, error) {
	c := s.c.Conn()
	var requested bool
	err := withDeadline(c, deadline, func() error {
		var err error
		requested, err = waitWithCancelRequest(ctx, c, grace, query)
		return err
	})
	return requested, err
}

// waitWithCancelRequest runs query on c, whose read deadline is set, under
// a context that ctx's cancellation does not end. On that cancellation it
// sends the server cancel requests (pgcancel.Until), so the wait ends on
// the server: cutting the statement on the client instead closes the
// connection, and its backend stays queued for the lock until the server
// notices — granted it meanwhile, it holds the lock ahead of live callers.
// Only a server that does not answer within grace has the statement cut
// (its read deadline moved to now). requested reports that a request went
// out; every one has been acknowledged when this returns, so none can
// reach a later statement of a direct connection (a pooler may forward one
// later: the caller does not pool a connection whose request the
// statement did not answer).
func waitWithCancelRequest(ctx context.Context, c *pgx.Conn, grace time.Duration, query string) (requested bool, err error) {
	if ctx.Done() == nil {
		_, err = c.Exec(ctx, query)
		return false, err
	}
	ended, acked := make(chan struct{}), make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(acked)
		if !pgcancel.Until(c.PgConn(), ended, grace) {
			c.PgConn().Conn().SetReadDeadline(time.Now())
		}
	})
	_, err = c.Exec(context.WithoutCancel(ctx), query)
	if stop() {
		return false, err
	}
	close(ended)
	<-acked
	return true, err
}

// withDeadline runs f, one statement on c, under c's read deadline
// (cleared when deadline is zero). A read deadline is enough: the package's
// statements are a few dozen bytes written to an idle connection's empty
// send buffer, so what a silent server withholds is the answer; and it is
// one runtime timer where SetDeadline arms two. The deadline stays set
// afterwards, as every statement sets its own and release clears it: a held
// lock's connection carries the last statement's stale deadline while it
// idles, which costs one timer change per statement instead of two. A
// statement that runs into the deadline fails with a timeout error and pgx
// closes the connection: the outcome is in doubt, and a closed connection
// holds no session lock.
func withDeadline(c *pgx.Conn, deadline time.Time, f func() error) error {
	if err := c.PgConn().Conn().SetReadDeadline(deadline); err != nil {
		return err
	}
	return f()
}

// clearDeadline removes the read deadline the last statement left on c, for
// the connection's next user; false if that failed.
func clearDeadline(c *pgx.Conn) bool {
	return c.PgConn().Conn().SetReadDeadline(time.Time{}) == nil
}

// release: pgxpool itself destroys a connection that is closed, busy or
// not idle outside a transaction.
func (s pgxSession) release() {
	if !clearDeadline(s.c.Conn()) {
		s.destroy()
		return
	}
	s.c.Release()
}

// destroy closes the connection first, so Release destroys it instead of
// pooling it.
func (s pgxSession) destroy() {
	ctx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
	defer cancel()
	s.c.Conn().Close(ctx)
	s.c.Release()
}

// Statements. Functions are schema-qualified so that a search_path cannot
// substitute others. Keys travel as bind parameters, except in the blocking
// batch, which must use the simple query protocol (several statements, no
// parameters): there the key is an integer literal formatted by
// Key.AppendArgs.
var (
	tryLockSQL = [2][2]string{ // [shared][pair]
		{"SELECT pg_catalog.pg_try_advisory_lock($1)", "SELECT pg_catalog.pg_try_advisory_lock($1, $2)"},
		{"SELECT pg_catalog.pg_try_advisory_lock_shared($1)", "SELECT pg_catalog.pg_try_advisory_lock_shared($1, $2)"},
	}
	unlockSQL = [2][2]string{
		{"SELECT pg_catalog.pg_advisory_unlock($1)", "SELECT pg_catalog.pg_advisory_unlock($1, $2)"},
		{"SELECT pg_catalog.pg_advisory_unlock_shared($1)", "SELECT pg_catalog.pg_advisory_unlock_shared($1, $2)"},
	}
	lockFunc = [2]string{"pg_catalog.pg_advisory_lock(", "pg_catalog.pg_advisory_lock_shared("}
)

const (
	pingSQL      = "SELECT pg_catalog.pg_backend_pid()"
	unlockAllSQL = "SELECT pg_catalog.pg_advisory_unlock_all()"
)

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// keyArgs is the bind-parameter form of k.
func keyArgs(k Key) []any {
	if a, b, ok := k.Pair(); ok {
		return []any{a, b}
	}
	n, _ := k.Int64()
	return []any{n}
}

// blockingLockSQL is one simple-protocol batch, which PostgreSQL runs as
// one implicit transaction: SET LOCAL scopes both timeouts to it, so they
// revert when it ends, whether the lock was granted or not, and the
// session's own settings are untouched. A session-level advisory lock
// taken inside a transaction stays held after it commits. statement_timeout
// is lifted so that only lock_timeout (the wait bound) governs the wait.
func blockingLockSQL(k Key, shared bool, timeoutMS int64) string {
	b := make([]byte, 0, 128)
	b = append(b, "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = "...)
	b = strconv.AppendInt(b, timeoutMS, 10)
	b = append(b, "; SELECT "...)
	b = append(b, lockFunc[b2i(shared)]...)
	b = k.AppendArgs(b)
	b = append(b, ')')
	return string(b)
}
