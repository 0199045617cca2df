package advisory_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// muteDialer dials connections whose writes it swallows while muted: the
// server never hears the statement and never answers, as behind a network
// partition — nothing fails, everything waits. Muting affects the
// connections open at the time; ones dialed later (pgx's cancel request)
// get through. Closing a connection still closes its socket, so the server
// sees the session end. (Only pgx backends: lib/pq answers a cancelled
// context with a cancel request but keeps reading, so a silent network
// holds it until TCP gives up; see the package documentation.)
type muteDialer struct {
	mu    sync.Mutex
	conns []*muteConn
}

type muteConn struct {
	net.Conn
	muted atomic.Bool
}

func (c *muteConn) Write(b []byte) (int, error) {
	if c.muted.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (d *muteDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &muteConn{Conn: conn}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return c, nil
}

func (d *muteDialer) set(muted bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.muted.Store(muted)
	}
}

// within runs f and fails the test if it has not returned after a minute:
// the bounds under test are far shorter, so a miss means a hang.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s: still blocked after a minute; the bound did not end it", what)
	}
}

// lockCycle takes and releases key, unmuted.
func lockCycle(t *testing.T, l *advisory.Locker, key advisory.Key) {
	t.Helper()
	lk, err := l.TryLock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSilentConnection: when the server stops answering (no error, no
// reset), the package's own bounds still end every statement — the try, the
// blocking wait, the unlock and the keepalive check — under a
// context.Background that cannot end, and the connection in doubt is
// closed, which ends its session and with it any lock.
func TestSilentConnection(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	adm := admin(t, db)
	ctx := context.Background()
	var d muteDialer
	// Short bounds for what runs on a muted connection, where nothing
	// answers at any speed; the default bounds for what must succeed
	// unmuted, however slow this machine is. Each pool has one connection,
	// shared by its Lockers.
	const short = 300 * time.Millisecond
	for name, open := range dialedPools(t, db, d.dial) {
		t.Run(name, func(t *testing.T) {
			roomy := open(advisory.WithKeepalive(time.Hour))
			waits := open(advisory.WithTimeout(short), advisory.WithKeepalive(time.Hour))
			releases := open(advisory.WithReleaseTimeout(short), advisory.WithKeepalive(time.Hour))
			for _, l := range []*advisory.Locker{roomy, waits, releases} {
				if err := l.Verify(ctx); err != nil {
					t.Fatal(err)
				}
			}
			key := advisory.KeyOf("silent:" + name)

			// The try and the blocking wait time out, typed. Each starts
			// on the pool's one connection, made idle and then muted.
			other := advisory.KeyOf("silent-other:" + name)
			for _, acquire := range []struct {
				name string
				f    func(context.Context, advisory.Key) (*advisory.Lock, error)
			}{{"TryLock", waits.TryLock}, {"Lock", waits.Lock}} {
				d.set(false)
				lockCycle(t, roomy, other)
				d.set(true)
				var lk *advisory.Lock
				var err error
				within(t, acquire.name, func() { lk, err = acquire.f(ctx, key) })
				d.set(false)
				if err == nil {
					lk.Release(ctx)
				}
				if !errors.Is(err, advisory.ErrTimeout) {
					t.Fatalf("%s on a silent connection: %v, want ErrTimeout", acquire.name, err)
				}
			}

			// The unlock is not confirmed: Release reports the lock lost
			// and closes the connection, and the server drops the lock.
			// The muted connection's replacement is dialled under the
			// default bound; the key may still be held by the closed
			// session's backend until the server notices the close.
			waitNoLocks(t, adm)
			lk, err := releases.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Release(ctx) // on a failure below; ErrNotHeld after the Release under test
			if n := len(holderPIDs(t, adm, key)); n != 1 {
				t.Fatalf("%d holders after TryLock, want 1", n)
			}
			d.set(true)
			within(t, "Release", func() { err = lk.Release(ctx) })
			d.set(false)
			if !errors.Is(err, advisory.ErrLost) {
				t.Fatalf("Release on a silent connection: %v, want ErrLost", err)
			}
			select {
			case <-lk.Lost():
			default:
				t.Fatal("Lost() not closed after an unconfirmed unlock")
			}
			waitNoLocks(t, adm)

			// The Locker goes on working with fresh connections.
			lockCycle(t, roomy, key)
		})
	}
}

// TestSilentConnectionKeepalive: a held lock whose connection goes silent
// is reported lost once a keepalive check has waited a second for its
// answer, and the server drops the lock when the connection is closed.
func TestSilentConnectionKeepalive(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	adm := admin(t, db)
	ctx := context.Background()
	var d muteDialer
	lockers := dialedLockers(t, db, d.dial, advisory.WithKeepalive(100*time.Millisecond))
	for name, l := range lockers {
		t.Run(name, func(t *testing.T) {
			key := advisory.KeyOf("silent-keepalive:" + name)
			lk, err := l.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Release(ctx) // on a failure below
			d.set(true)
			within(t, "Lost", func() { <-lk.Lost() })
			d.set(false)
			if !errors.Is(lk.Err(), advisory.ErrLost) {
				t.Fatalf("Err() = %v after the loss, want ErrLost", lk.Err())
			}
			if err := lk.Release(ctx); !errors.Is(err, advisory.ErrLost) {
				t.Fatalf("Release after the loss: %v, want ErrLost", err)
			}
			waitNoLocks(t, adm)
		})
	}
}
