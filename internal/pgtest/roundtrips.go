package pgtest

import (
	"context"
	"net"
	"sync/atomic"
)

// RoundTrips counts the round trips made on the connections dialled
// through [RoundTrips.Dial]: every first read after a write is one, which
// is how a client that waits for the server's answer before it sends more
// (pgx, lib/pq) spends them. Benchmarks set it as pgx's
// ConnConfig.DialFunc and read [RoundTrips.Count] around each arm, so the
// round trips a form costs are measured beside its time.
type RoundTrips struct{ n atomic.Int64 }

// Dial dials the server like net.Dialer and counts the connection's round
// trips.
func (r *RoundTrips) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &r.n}, nil
}

// Count is the number of round trips so far, over every connection.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

type countedConn struct {
	net.Conn
	n     *atomic.Int64
	wrote atomic.Bool
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.wrote.Store(true)
	return c.Conn.Write(b)
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.wrote.Swap(false) {
		c.n.Add(1)
	}
	return n, err
}
