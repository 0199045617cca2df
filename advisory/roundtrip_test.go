package advisory_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// turnCounter counts round trips on the connections it dialed, from the
// protocol itself, so that the count cannot depend on how reads and writes
// interleave on a busy machine: every round trip of the PostgreSQL
// protocol ends with a message after which the client waits for
// ReadyForQuery — Sync ('S') in the extended protocol, Query ('Q') in the
// simple one — so it counts those among the messages the client writes.
type turnCounter struct{ turns atomic.Int64 }

type countedConn struct {
	net.Conn
	c       *turnCounter
	started bool   // the startup message (which has no type byte) is past
	pending []byte // a message not yet written whole
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.pending = append(c.pending, b...)
	for {
		p := c.pending
		if !c.started { // int32 length, then the payload
			if len(p) < 4 {
				break
			}
			n := int(binary.BigEndian.Uint32(p))
			if len(p) < n {
				break
			}
			// An SSLRequest or GSSENCRequest comes before the startup
			// message, untyped too.
			negotiation := n == 8 && binary.BigEndian.Uint32(p[4:]) >= 80877103
			c.pending, c.started = p[n:], !negotiation
			continue
		}
		if len(p) < 5 { // type byte, int32 length (itself included)
			break
		}
		n := 1 + int(binary.BigEndian.Uint32(p[1:]))
		if len(p) < n {
			break
		}
		if p[0] == 'S' || p[0] == 'Q' {
			c.c.turns.Add(1)
		}
		c.pending = p[n:]
	}
	return c.Conn.Write(b)
}

func (tc *turnCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: conn, c: tc}, nil
}

// dialedLockers returns Lockers, one per pgx backend, on one-connection
// pools of db that dial through dial. Both drivers ping a pooled connection
// idle for over a second before handing it out; that is the drivers'
// policy, not this package's, and it is off here so that what a test sees
// on the wire cannot depend on scheduling.
func dialedLockers(t *testing.T, db *pgtest.DB, dial func(context.Context, string, string) (net.Conn, error), opts ...advisory.Option) map[string]*advisory.Locker {
	lockers := map[string]*advisory.Locker{}
	for name, open := range dialedPools(t, db, dial) {
		lockers[name] = open(opts...)
	}
	return lockers
}

// dialedPools is dialedLockers' pools: for each pgx backend, a function
// that opens a Locker on its one-connection pool.
func dialedPools(t *testing.T, db *pgtest.DB, dial func(context.Context, string, string) (net.Conn, error)) map[string]func(...advisory.Option) *advisory.Locker {
	pcfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 1
	pcfg.ConnConfig.DialFunc = dial
	pcfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ccfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	ccfg.DialFunc = dial
	var sdb *sql.DB = stdlib.OpenDB(*ccfg,
		stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false }))
	sdb.SetMaxOpenConns(1)
	t.Cleanup(func() { sdb.Close() })
	return map[string]func(...advisory.Option) *advisory.Locker{
		"pgxpool": func(opts ...advisory.Option) *advisory.Locker { return advisory.NewPool(pool, opts...) },
		"sql-pgx": func(opts ...advisory.Option) *advisory.Locker { return advisory.New(sdb, opts...) },
	}
}

// TestRoundTrips: an uncontended cycle costs two round trips — the lock and
// the unlock; taking the pooled connection adds none. (Counting is
// deterministic; the speed is in BenchmarkCycleRatio.)
func TestRoundTrips(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	var tc turnCounter
	const cycles = 50
	// The counter counts: ten statements on a plain connection are ten
	// round trips.
	ccfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	ccfg.DialFunc = tc.dial
	plain, err := pgx.ConnectConfig(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	before := tc.turns.Load()
	for i := 0; i < 10; i++ {
		if _, err := plain.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := tc.turns.Load() - before; n != 10 {
		t.Fatalf("ten statements counted as %d round trips", n)
	}
	plain.Close(ctx)
	for name, l := range dialedLockers(t, db, tc.dial, advisory.WithKeepalive(time.Hour)) {
		ops := map[string]func(context.Context, advisory.Key) (*advisory.Lock, error){
			"TryLock": l.TryLock, "Lock": l.Lock, "TryRLock": l.TryRLock, "RLock": l.RLock,
		}
		// Warm up: the first-use probe, the connection, prepared statements.
		for i := 0; i < 3; i++ {
			for _, op := range ops {
				mustRelease(t, mustLock(t)(op(ctx, advisory.KeyInt(int64(i)))))
				mustRelease(t, mustLock(t)(op(ctx, advisory.KeyPair(int32(i), 1))))
			}
		}
		for opName, op := range ops {
			before := tc.turns.Load()
			for i := 0; i < cycles; i++ {
				key := advisory.KeyInt(int64(1000 + i)) // a new key each cycle
				if i%2 == 1 {
					key = advisory.KeyPair(int32(i), 2)
				}
				mustRelease(t, mustLock(t)(op(ctx, key)))
			}
			got := float64(tc.turns.Load()-before) / cycles
			if got != 2 {
				t.Errorf("%s: %s+Release costs %.2f round trips, want 2", name, opName, got)
			} else {
				t.Logf("%s: %s+Release = %.0f round trips", name, opName, got)
			}
		}
	}
}
