package matrix

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// RoundTrips counts round trips: those on the PostgreSQL connections
// dialled through Dial, counted on the wire as pgtest.Wire counts them (a
// read after a write), and the requests to other stores a row adds. The
// zero value is ready; it is safe for concurrent use.
type RoundTrips struct {
	wire  pgtest.Wire
	added atomic.Int64
}

// Dial dials like net.Dialer and counts the round trips of the connection
// it returns: put it in a pgx configuration's DialFunc.
func (r *RoundTrips) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return r.wire.Dial(ctx, network, addr)
}

// Add counts n requests made to a store that is not reached through Dial
// (one Redis command or pipeline, one etcd or DynamoDB request: 1 each).
func (r *RoundTrips) Add(n int64) { r.added.Add(n) }

// Load returns the round trips counted so far.
func (r *RoundTrips) Load() int64 { return r.wire.Turns() + r.added.Load() }

// OpenSQL opens a *sql.DB (pgx's stdlib driver) on dsn whose connections
// count their round trips in r. It is the one counting driver of the
// repository's tests: a test that asserts how many round trips a call
// costs opens its handle here.
func OpenSQL(dsn string, r *RoundTrips) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("matrix: %w", err)
	}
	cfg.DialFunc = r.Dial
	return stdlib.OpenDB(*cfg), nil
}

// Warm holds n of db's connections at once, then returns them to its pool,
// which must keep at least n idle: a cell's first operations then find
// their connections dialled, instead of timing the start of a new
// backend (a fork and an authentication on the server) for each
// contender inside a one-second cell.
func Warm(ctx context.Context, db *sql.DB, n int) error {
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("matrix: warm: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}
