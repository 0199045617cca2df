package pgtest

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
)

// Wire counts round trips on the connections dialled through it (set
// [Wire.Dial] as a pgx ConnConfig's DialFunc), two ways that must agree:
// turns (a read after a write) and ReadyForQuery messages ('Z', one per
// simple Query and per extended-protocol Sync). The zero value is ready
// to use.
type Wire struct {
	mu           sync.Mutex
	turns, ready int
}

// Dial dials addr and counts the connection's round trips.
func (w *Wire) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &wireConn{Conn: c, w: w}, nil
}

// Reset sets both counts to zero.
func (w *Wire) Reset() {
	w.mu.Lock()
	w.turns, w.ready = 0, 0
	w.mu.Unlock()
}

// Counts returns the round trips since the last Reset: turns and
// ReadyForQuery messages.
func (w *Wire) Counts() (turns, ready int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.turns, w.ready
}

type wireConn struct {
	net.Conn
	w      *Wire
	wrote  bool
	header []byte // a partial message header carried over between reads
	skip   int    // bytes of the current message body still to skip
}

func (c *wireConn) Write(b []byte) (int, error) {
	c.w.mu.Lock()
	c.wrote = true
	c.w.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *wireConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if n > 0 && c.wrote {
		c.w.turns++
		c.wrote = false
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
				c.w.ready++
			}
			c.skip = int(binary.BigEndian.Uint32(c.header[1:])) - 4
			c.header = c.header[:0]
		}
	}
	return n, err
}
