package lockedtx

import (
	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/waitbound"
)

// connState is what this package keeps with a pgx connection. It lives in
// the connection's pgconn CustomData, used by the goroutine that holds the
// connection: no package state, and it goes when the connection does.
type connState struct {
	// cachesStatements: the connection runs in pgx's default mode,
	// QueryExecModeCacheStatement (prepareBatch). Kept here because
	// conn.Config() copies the whole configuration on every call, the
	// largest client cost of a locked transaction when it was called for
	// each one.
	cachesStatements bool
	// prepared: a batch was prepared on the connection, the first of
	// which measured a round trip into est (prepareBatch).
	prepared bool
	// est is the round-trip and hold estimates that bound a
	// deadline-bound lock wait on the connection (Attempt.bind). Unlike
	// the fields above it is safe for concurrent use: an attempt feeds it
	// after COMMIT, when the connection may be back in its pool.
	est waitbound.Estimates
}

// connStateKey is the key of a connection's connState in CustomData.
const connStateKey = "github.com/sqlock/sqlock/txlock.conn"

// connStateOf returns c's connState, made on first use.
func connStateOf(c *pgx.Conn) *connState {
	m := c.PgConn().CustomData()
	st, _ := m[connStateKey].(*connState)
	if st == nil {
		st = &connState{cachesStatements: c.Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement}
		m[connStateKey] = st
	}
	return st
}
