package pgtest

import (
	"context"
	"encoding/binary"
	"net"
	"sync/atomic"
)

// Wire counts round trips on the connections dialled through it, two ways
// that must agree: turns (a read after a write) and ReadyForQuery messages
// ('Z', one per simple Query and per extended-protocol Sync). Put its Dial
// in a pgx configuration's DialFunc:
//
//	var w pgtest.Wire
//	cfg.ConnConfig.DialFunc = w.Dial
//
// A Wire is safe for concurrent use, and cheap enough to leave in a
// benchmark's connections (two atomic additions per round trip); its zero
// value is ready.
type Wire struct {
	turns, ready atomic.Int64
}

// Dial dials like net.Dialer and counts on the connection it returns.
func (w *Wire) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &wireConn{Conn: c, w: w}, nil
}

// Reset sets both counts to zero.
func (w *Wire) Reset() {
	w.turns.Store(0)
	w.ready.Store(0)
}

// Counts returns the round trips counted since the last Reset: turns and
// ReadyForQuery messages.
func (w *Wire) Counts() (turns, ready int) {
	return int(w.turns.Load()), int(w.ready.Load())
}

// Turns returns the turns counted since the last Reset: a benchmark reads
// it before and after an arm.
func (w *Wire) Turns() int64 { return w.turns.Load() }

// wireConn counts one connection's round trips. Read is not called
// concurrently with itself (the protocol has one reader); Write may run
// beside it.
type wireConn struct {
	net.Conn
	w      *Wire
	wrote  atomic.Bool
	header []byte // a partial message header carried over between reads
	skip   int    // bytes of the current message body still to skip
}

func (c *wireConn) Write(b []byte) (int, error) {
	c.wrote.Store(true)
	return c.Conn.Write(b)
}

func (c *wireConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.wrote.Swap(false) {
		c.w.turns.Add(1)
	}
	// Walk the backend messages: type byte, int32 length (itself included).
	for p := b[:n]; len(p) > 0; {
		if c.skip > 0 {
			k := min(c.skip, len(p))
			c.skip -= k
			p = p[k:]
			continue
		}
		k := min(5-len(c.header), len(p))
		c.header = append(c.header, p[:k]...)
		p = p[k:]
		if len(c.header) == 5 {
			if c.header[0] == 'Z' {
				c.w.ready.Add(1)
			}
			c.skip = int(binary.BigEndian.Uint32(c.header[1:])) - 4
			c.header = c.header[:0]
		}
	}
	return n, err
}
