package advisory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/heldkeys"
	"github.com/sqlock/sqlock/internal/pgerror"
)

// WithMultiplexing lets session locks share connections: up to conns
// connections of the pool form a shared set, each holding any number of
// locks. A try-once ([Locker.TryLock], [Locker.TryRLock]) rides on a
// connection of the set that does not hold its key yet — the idle one with
// the fewest locks; a new one only when every connection of the set is
// busy with a statement, so try-onces made one after another share one
// connection — and while the set's connections are being opened it waits
// for one rather than taking a connection of its own; a blocking wait
// ([Locker.Lock], [Locker.RLock], [Locker.Do]) waits on a connection of its
// own, which joins the set once granted if the set has room. [Lock.Release]
// unlocks only its own key; a connection whose last lock is released goes
// back to the pool. The price is the blast radius: when a shared connection
// dies, every lock on it is lost at once, each reported through its
// [Lock.Lost]. Off by default (see the package documentation); conns must
// be positive and should leave the pool room for waits and other work.
func WithMultiplexing(conns int) Option {
	return func(c *config) error {
		if conns <= 0 {
			return invalidOption("multiplexing over %d connections: must be positive", conns)
		}
		c.muxConns = conns
		return nil
	}
}

// mux is a Locker's shared set of connections.
//
// PostgreSQL's session locks stack per backend: a second
// pg_try_advisory_lock of a key on the backend that holds it succeeds, and
// so would let two holders of one process in. So a connection of the set
// carries each key at most once (keys), and a try-once of a key that every
// connection of a full set carries takes a connection of its own, where
// the server decides. A set whose connections are still being opened is
// not full yet: a try-once that finds no connection for its key waits for
// one to join (see pick).
//
// Placement: the set grows with concurrency, not with the number of locks.
// A connection is opened for the set only when every connection of it that
// could take the key is running a statement; otherwise the key goes to the
// idle connection with the fewest locks. So try-onces made one after
// another all ride one connection (the fewest connections out of the pool,
// and one round trip each, as without multiplexing), and a burst of
// concurrent ones opens up to max connections and spreads over them.
type mux struct {
	l   *Locker
	max int

	mu      sync.Mutex
	conns   []*muxConn
	opening int           // connections being taken from the pool for the set
	changed chan struct{} // closed when a connection joins, fails to open or leaves; nil until awaited
}

// placement is where pick sends a try-once.
type placement uint8

const (
	placed    placement = iota // on a connection of the set, its key reserved there
	openConn                   // on a connection the caller takes from the pool for the set (see join)
	awaitConn                  // nowhere yet: connections are being opened; pick again when one joins
	ownConn                    // every connection of a full set carries the key: one of its own
)

type connState uint8

const (
	connLive    connState = iota
	connRetired           // held no lock: back to the pool
	connDead              // closed: its locks are lost
)

// muxConn is one connection of the shared set.
type muxConn struct {
	m    *mux
	sess session
	sem  chan struct{} // one statement at a time; held while sess is used
	pid  int32         // backend pid seen by the first check; guarded by sem

	// guarded by m.mu
	state  connState
	keys   map[heldkeys.Tag]struct{} // held, or being tried, on this backend
	locks  map[*Lock]struct{}
	busy   int   // statements waiting for sem or running
	cause  error // why it died
	broken bool  // a check failed after it was retired: destroy, don't pool

	sched schedule // the keepalive: one check for every lock on the connection
}

func newMux(l *Locker, max int) *mux { return &mux{l: l, max: max} }

func (m *mux) newConn(sess session, tag heldkeys.Tag) *muxConn {
	return &muxConn{m: m, sess: sess, sem: make(chan struct{}, 1),
		keys: map[heldkeys.Tag]struct{}{tag: {}}, locks: map[*Lock]struct{}{}}
}

// pick places a try-once of tag (see placement): on the connection of the
// set best placed to try it — one that does not carry it, idle first, then
// with the fewest locks — unless none is idle and the set has room, when
// the caller opens one. With no room and no connection that can take tag,
// the key waits for a connection still opening (awaitConn: pick again once
// changed is closed), and takes one of its own only when none is: "no
// connection of the set can take this key yet" is not "every connection
// carries it".
func (m *mux) pick(tag heldkeys.Tag) (best *muxConn, p placement, changed <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.conns {
		if _, held := c.keys[tag]; held {
			continue
		}
		if best == nil || c.busy < best.busy || c.busy == best.busy && len(c.locks) < len(best.locks) {
			best = c
		}
	}
	switch {
	case (best == nil || best.busy > 0) && len(m.conns)+m.opening < m.max:
		m.opening++
		return nil, openConn, nil
	case best != nil:
		best.keys[tag] = struct{}{}
		best.busy++
		return best, placed, nil
	case m.opening > 0:
		if m.changed == nil {
			m.changed = make(chan struct{})
		}
		return nil, awaitConn, m.changed
	}
	return nil, ownConn, nil
}

// changedLocked wakes the try-onces waiting for the set to change. m.mu is
// held.
func (m *mux) changedLocked() {
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
}

// openFailed ends an opening that pick asked for and that failed.
func (m *mux) openFailed() {
	m.mu.Lock()
	m.opening--
	m.changedLocked()
	m.mu.Unlock()
}

// join adds sess, taken from the pool after pick said open, to the set
// with tag reserved on it.
func (m *mux) join(sess session, tag heldkeys.Tag) *muxConn {
	c := m.newConn(sess, tag)
	c.busy = 1
	m.mu.Lock()
	m.opening--
	m.conns = append(m.conns, c)
	m.changedLocked()
	m.mu.Unlock()
	c.startChecks()
	return c
}

// adopt makes the connection of lk, a lock granted on a connection of its
// own, a connection of the set if the set has room; false if not.
func (m *mux) adopt(lk *Lock) bool {
	c := m.newConn(lk.sess, tagOf(lk.key))
	c.locks[lk] = struct{}{}
	m.mu.Lock()
	if len(m.conns)+m.opening >= m.max {
		m.mu.Unlock()
		return false
	}
	lk.mc, lk.sess = c, nil
	m.conns = append(m.conns, c)
	m.changedLocked()
	m.mu.Unlock()
	c.startChecks()
	return true
}

// removeLocked takes c out of the set. m.mu is held.
func (m *mux) removeLocked(c *muxConn) {
	for i, o := range m.conns {
		if o == c {
			m.conns[i] = m.conns[len(m.conns)-1]
			m.conns[len(m.conns)-1] = nil
			m.conns = m.conns[:len(m.conns)-1]
			m.changedLocked() // room for another
			return
		}
	}
}

// done ends one statement's use of c: tag is no longer carried for it
// (unless lk, granted, now holds it), and a connection left with no lock
// and no statement goes back to the pool.
func (m *mux) done(c *muxConn, tag heldkeys.Tag, lk *Lock) {
	m.mu.Lock()
	c.busy--
	if lk != nil {
		c.locks[lk] = struct{}{}
	} else {
		delete(c.keys, tag)
	}
	retire := c.state == connLive && c.busy == 0 && len(c.locks) == 0
	if retire {
		c.state = connRetired
		m.removeLocked(c)
	}
	m.mu.Unlock()
	if retire {
		c.retire()
	}
}

// acquireConn waits for c's statement slot until ctx ends; false if it
// ended first, or c died meanwhile (then the slot is not held).
func (c *muxConn) acquireConn(ctx context.Context) (ok, dead bool) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return false, false
	}
	c.m.mu.Lock()
	dead = c.state != connLive
	c.m.mu.Unlock()
	if dead {
		<-c.sem
		return false, true
	}
	return true, false
}

// try is a try-once on the shared set. ok is false when every connection
// of a full set carries key: the caller takes a connection of its own.
//
// A statement on a shared connection is never cut by the caller's
// context: a cut leaves the connection in doubt, and closing it would cost
// every lock on it. It runs detached, bounded by the later of the wait
// bound and the release timeout.
func (m *mux) try(ctx context.Context, key Key, shared bool, w *waitBound) (_ *Lock, _ error, ok bool) {
	l := m.l
	tag := tagOf(key)
	for {
		c, p, changed := m.pick(tag)
		switch p {
		case ownConn:
			return nil, nil, false
		case awaitConn:
			select {
			case <-changed:
				continue
			case <-w.ctx.Done():
				return nil, l.connTimeout(w, nil), true
			}
		case openConn:
			s, err := l.conn(w)
			if err != nil {
				m.openFailed()
				return nil, err, true
			}
			c = m.join(s, tag)
		}
		got, dead := c.acquireConn(w.ctx)
		if dead {
			continue // it died while this call waited: try another
		}
		if !got {
			m.done(c, tag, nil)
			return nil, w.timeoutFor(errSetBusy, nil), true
		}
		lk, err := c.tryLock(ctx, key, shared, w)
		return lk, err, true
	}
}

// errSetBusy: a try-once's wait ran out behind other statements on the
// connection of the shared set it was placed on.
var errSetBusy = errkind.New(ErrConnTimeout, "advisory: timed out waiting for a connection of the shared set: it was busy with other statements")

// tryLock runs the try-once on c, whose statement slot the caller holds
// and releases here.
func (c *muxConn) tryLock(ctx context.Context, key Key, shared bool, w *waitBound) (*Lock, error) {
	l := c.m.l
	tag := tagOf(key)
	dctx := context.WithoutCancel(ctx)
	end := w.end
	if e := time.Now().Add(l.cfg.unlockTimeout); e.After(end) {
		end = e
	}
	if l.names != nil {
		l.names.record(dctx, c.sess, key, end, l.cfg.log)
	}
	args := keyArgs(key)
	var granted bool
	err := c.sess.queryRow(dctx, end, tryLockSQL[b2i(shared)][b2i(key.IsPair())], args, &granted)
	switch {
	case err != nil && pgerror.Code(err) != "" && !pgerror.ConnectionLost(err) && time.Now().Before(end):
		// The server refused the statement (out of shared memory for
		// locks, say): nothing granted, the connection is sound.
		<-c.sem
		c.m.done(c, tag, nil)
		return nil, &Error{Op: w.op, Key: key, Cause: err}
	case err != nil:
		c.fail(err)
		<-c.sem
		if w.out() && !pgerror.ConnectionLost(err) {
			return nil, w.timeout(err)
		}
		return nil, &Error{Op: w.op, Key: key, Err: ErrUnavailable, Cause: err}
	case !granted:
		<-c.sem
		c.m.done(c, tag, nil)
		return nil, &Error{Op: w.op, Key: key, Err: ErrNotAcquired}
	}
	lk := newLock(l, key, shared, nil, args, time.Now())
	lk.mc = c
	c.m.done(c, tag, lk)
	<-c.sem
	if ctx.Err() != nil {
		// Granted, but the caller has gone.
		lk.ended.Store(true)
		c.m.unlock(ctx, lk)
		return nil, ctxError(w.op, key, ctx)
	}
	return lk, nil
}

// unlock releases lk, held on a shared connection: only its key. An
// unlock that is not confirmed closes the connection, and so loses every
// lock on it. It returns nil or why lk is lost.
func (m *mux) unlock(ctx context.Context, lk *Lock) error {
	c := lk.mc
	tag := tagOf(lk.key)
	m.mu.Lock()
	if c.state != connLive {
		defer m.mu.Unlock()
		return c.cause
	}
	c.busy++
	m.mu.Unlock()
	c.sem <- struct{}{} // the statement ahead is bounded
	m.mu.Lock()
	if c.state != connLive {
		c.busy--
		defer m.mu.Unlock()
		<-c.sem
		return c.cause
	}
	m.mu.Unlock()
	var ok bool
	sent := time.Now()
	err := c.sess.queryRow(context.WithoutCancel(ctx), sent.Add(m.l.cfg.unlockTimeout),
		unlockSQL[b2i(lk.shared)][b2i(lk.key.IsPair())], lk.args, &ok)
	if err == nil && !ok {
		err = errors.New("pg_advisory_unlock returned false: the session did not hold the lock")
	}
	if err != nil {
		m.l.cfg.log.Warn("advisory: shared connection closed: unlock not confirmed", "key", lk.key.String(), "error", err)
		c.fail(err)
		<-c.sem
		return err
	}
	m.l.est.ObserveRTT(time.Since(sent))
	m.mu.Lock()
	delete(c.locks, lk)
	delete(c.keys, tag)
	m.mu.Unlock()
	m.done(c, tag, nil) // busy--; pools c if it was the last lock
	<-c.sem
	return nil
}

// fail closes c, whose statement slot the caller holds (or which a check
// found dead), and reports every lock on it lost.
func (c *muxConn) fail(cause error) {
	m := c.m
	m.mu.Lock()
	if c.state != connLive {
		c.broken = true // retired: its retirer destroys it
		m.mu.Unlock()
		return
	}
	c.state, c.cause = connDead, cause
	m.removeLocked(c)
	locks := c.locks
	c.locks = nil
	m.mu.Unlock()
	c.sched.stop()
	m.l.keeper.remove(c)
	c.sess.destroy()
	m.l.cfg.log.Warn("advisory: shared connection lost", "locks", len(locks), "error", cause)
	for lk := range locks {
		lk.markLost(cause)
	}
}

// retire returns c, which holds no lock, to the pool once no check runs.
func (c *muxConn) retire() {
	c.sched.stop()
	c.m.l.keeper.remove(c)
	c.sched.wait()
	c.m.mu.Lock()
	broken := c.broken
	c.m.mu.Unlock()
	if broken {
		c.sess.destroy()
		return
	}
	c.sess.release()
}

func (c *muxConn) startChecks() {
	c.sched.setNext(time.Now().Add(c.m.l.cfg.keepalive))
	c.m.l.keeper.add(c)
}

func (c *muxConn) checkIfDue(now time.Time) {
	if c.sched.begin(now) {
		go c.check()
	}
}

// check is the keepalive check of a shared connection, as Lock.check is of
// a connection of its own. When a statement is on the wire it skips (that
// statement's bound watches the connection) and the next tick tries again.
func (c *muxConn) check() {
	var next time.Time // when the next check is due; zero: as it was (skipped) or none (stopped)
	defer func() { c.sched.end(next) }()
	select {
	case c.sem <- struct{}{}:
	default:
		return
	}
	defer func() { <-c.sem }()
	if c.sched.isStopped() {
		return
	}
	l := c.m.l
	var pid int32
	sent := time.Now()
	err := c.sess.queryRow(context.Background(), sent.Add(pingTimeout(l.cfg.keepalive)), pingSQL, nil, &pid)
	if err == nil {
		l.est.ObserveRTT(time.Since(sent))
		if c.pid != 0 && pid != c.pid {
			err = fmt.Errorf("the connection's server backend changed from pid %d to %d: a pooler moved the session", c.pid, pid)
		}
	}
	if err != nil {
		c.fail(err)
		return
	}
	c.pid = pid
	next = time.Now().Add(l.cfg.keepalive)
}
