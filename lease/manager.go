package lease

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/lazytimer"
	"github.com/sqlock/sqlock/internal/ttllock"
	"github.com/sqlock/sqlock/observe"
)

// MinTTL is the shortest TTL a lease may have (shorter: [ErrInvalid]). A
// TTL must also span at least 8 of the fastest round trips this Manager has
// measured, once it has measured a few (shorter: [ErrTTLTooShort]).
const MinTTL = 10 * time.Millisecond

// ttlRoundTrips is how many of the Manager's measured round trips a TTL
// must span: a renewal every TTL/3 must have room to be retried.
const ttlRoundTrips = 8

// rttSamples is how many round trips the Manager measures before it judges
// a TTL by them: the first ones on a new pool include dialing and
// authenticating a connection, which can take hundreds of milliseconds on
// a loaded machine, and would refuse a TTL that is ample.
const rttSamples = 4

// Manager acquires leases in one table of one database. It is safe for
// concurrent use; make one per pool and share it.
type Manager struct {
	b    backend
	cfg  config
	err  error // from New: nil handle or invalid option
	stmt statements
	ntf  *notifier // nil when polling

	timers lazytimer.Queue // the held leases' deadlines and renewals

	rtt  atomic.Int64 // fastest round trip of acquire and renew seen, in ns
	rttN atomic.Int64 // how many round trips were seen

	onPause func(listening bool) // tests: called when a waiter begins a pause
	onWake  func(notified bool)  // tests: called when a pause ends, by a notification or not
	safety  time.Duration        // tests: a listening waiter's safety poll; 0: safetyPoll
}

// New returns a Manager on db, a *sql.DB (any PostgreSQL driver) or a
// *pgxpool.Pool. The table must exist (see [Migrate] and [DDL]).
//
// Waiters learn of a release through LISTEN on a connection of their
// own (pgxpool, or database/sql with pgx's stdlib driver), held only while
// someone waits; with other drivers, behind a pooler in transaction mode
// (detected before the first LISTEN), or with [WithPolling], they poll.
//
// New does not fail: a nil db or an invalid option is reported, as an
// error matching [sqlock.ErrNilHandle] or [sqlock.ErrInvalidOption], by
// every method.
func New[DB Handle](db DB, opts ...Option) *Manager {
	m := &Manager{}
	m.cfg, m.err = buildConfig(opts)
	if m.err != nil {
		m.err = &Error{Op: "new", Cause: m.err}
		return m
	}
	m.b = newBackend(db)
	if m.b == nil {
		m.err = &Error{Op: "new", Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil database handle")}
		return m
	}
	m.stmt = buildStatements(m.cfg.table)
	if m.cfg.poll == 0 {
		m.ntf = newNotifier(m.b, m.cfg.table.channel())
	}
	return m
}

// Acquire takes the lease called name for ttl, waiting while someone else
// holds it: until it is released (a notification, or a poll) or expires
// on the server's clock, for at most the Manager's timeout (WithTimeout)
// or ctx's deadline, whichever is first. A wait that runs out returns an
// error matching [ErrTimeout].
//
// The lease is renewed every ttl/3 until Release; [Lease.Lost] fires when
// it can no longer be trusted.
func (m *Manager) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	return m.observed(ctx, "acquire", name, ttl, true)
}

// TryAcquire is Acquire without the wait: if the lease is held it returns
// an error matching [ErrNotAcquired] at once. (If the lease just expired
// while its old holder's guarded transaction is still open, the attempt
// waits for that transaction, within the Manager's timeout.)
func (m *Manager) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	return m.observed(ctx, "tryacquire", name, ttl, false)
}

// observed is acquire reported to the Manager's observer.
func (m *Manager) observed(ctx context.Context, op, name string, ttl time.Duration, wait bool) (*Lease, error) {
	if m == nil || m.cfg.obs == nil {
		return m.acquire(ctx, op, name, ttl, wait, time.Time{})
	}
	start := time.Now()
	l, err := m.acquire(ctx, op, name, ttl, wait, start)
	ttllock.ObserveFailure(ctx, m.cfg.obs, observe.Event{Source: "lease", Name: name}, start, err, ErrInvalid)
	return l, err
}

// acquire takes the lease; began is when the acquisition began (its
// observed wait).
func (m *Manager) acquire(ctx context.Context, op, name string, ttl time.Duration, wait bool, began time.Time) (*Lease, error) {
	if m == nil {
		return nil, &Error{Op: op, Name: name, Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil Manager")}
	}
	if m.err != nil {
		return nil, m.err
	}
	if err := m.check(name, ttl); err != nil {
		return nil, &Error{Op: op, Name: name, Err: ErrInvalid, Cause: err}
	}
	if ctx == nil {
		return nil, &Error{Op: op, Name: name, Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil context")}
	}
	ctx, cancel := ttllock.BoundWait(ctx, m.cfg.timeout)
	defer cancel()
	if m.ttlTooShort(ttl) != nil {
		m.remeasure(ctx)
		if err := m.ttlTooShort(ttl); err != nil {
			return nil, &Error{Op: op, Name: name, Err: ErrTTLTooShort, Cause: err}
		}
	}
	owner := newOwner()
	var sub *subscription
	defer func() { sub.close() }()
	listen := m.ntf != nil
	for {
		sent := time.Now()
		token, remaining, err := m.try(ctx, name, owner, ttl)
		if err != nil {
			m.cleanUp(name, owner)
			if ctx.Err() != nil {
				return nil, ctxError(op, name, ctx)
			}
			return nil, &Error{Op: op, Name: name, Cause: err}
		}
		m.observeRTT(time.Since(sent))
		if token > 0 {
			return m.newLease(ctx, name, owner, token, ttl, began, sent), nil
		}
		if !wait {
			return nil, &Error{Op: op, Name: name, Err: ErrNotAcquired}
		}
		if sub != nil && sub.dead.Load() {
			sub.close()
			sub = nil
		}
		if sub == nil && listen {
			// Listen, then try again at once: a release between the failed
			// try and the LISTEN is seen by the try, one after by the
			// notification.
			s, err := m.ntf.subscribe(ctx, name)
			if err == nil {
				sub = s
				continue
			}
			if ctx.Err() != nil {
				return nil, ctxError(op, name, ctx)
			}
			listen = false // this wait polls
		}
		if err := m.pause(ctx, sub, remaining); err != nil {
			return nil, ctxError(op, name, ctx)
		}
	}
}

// try is one attempt: the lease's token if it was granted (0 if not), and
// the time the current holder has left in µs (-1: unknown).
func (m *Manager) try(ctx context.Context, name, owner string, ttl time.Duration) (token, remaining int64, err error) {
	for range vanishedRetries {
		err = m.b.queryRow(ctx, m.stmt.acquire, []any{name, owner, ttl.Microseconds()}, &token, &remaining)
		if !vanished(err) {
			break
		}
	}
	return token, remaining, err
}

// cleanupTimeout bounds the release of an acquisition whose answer was
// lost (the context ended, the connection broke): if the server granted it,
// it is given back rather than left to expire.
const cleanupTimeout = 500 * time.Millisecond

func (m *Manager) cleanUp(name, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var one int
	m.b.queryRow(ctx, m.stmt.release, []any{name, owner}, &one)
}

// Bounds of a listening waiter's pause: a notification normally ends it;
// the holder's expiry, or safetyPoll if none is known, ends it anyway
// (a missed notification costs at most that).
const (
	safetyPoll  = time.Second
	expiryGrace = 2 * time.Millisecond // after the expiry the server reported
	retrySoon   = 5 * time.Millisecond // when the holder's row was not visible
)

// pause waits before the next try: for a notification (when subscribed),
// the holder's expiry, or a poll interval, whichever is first. It returns
// the context's error if ctx ends first.
func (m *Manager) pause(ctx context.Context, sub *subscription, remaining int64) error {
	d := safetyPoll
	if m.safety > 0 {
		d = m.safety
	}
	if sub == nil {
		interval := m.cfg.poll
		if interval == 0 {
			interval = defaultPoll
		}
		d = interval/2 + rand.N(interval/2+1)
	}
	switch {
	case remaining > 0:
		d = min(d, time.Duration(remaining)*time.Microsecond+expiryGrace+rand.N(expiryGrace))
	case remaining == 0 || remaining == -1 && sub != nil:
		// Expired but not ours (someone was quicker), or not visible yet:
		// a fresh holder's row is being written.
		d = min(d, retrySoon/2+rand.N(retrySoon))
	}
	if m.onPause != nil {
		m.onPause(sub != nil)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	var woken <-chan struct{}
	if sub != nil {
		woken = sub.c
	}
	select {
	case <-t.C:
		m.woke(false)
		return nil
	case <-woken:
		m.woke(true)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Manager) woke(notified bool) {
	if m.onWake != nil {
		m.onWake(notified)
	}
}

// defaultPoll is the polling interval of a driver that cannot LISTEN when
// WithPolling did not set one.
const defaultPoll = 50 * time.Millisecond

// observeRTT keeps the fastest round trip seen: a lower bound of what a
// round trip costs, which load (pool waits, row-lock waits, a busy CPU)
// never raises, so a TTL valid once stays valid.
func (m *Manager) observeRTT(d time.Duration) {
	m.rttN.Add(1)
	for {
		old := m.rtt.Load()
		if old != 0 && old <= int64(d) || m.rtt.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// check refuses bad input before anything is sent.
func (m *Manager) check(name string, ttl time.Duration) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > maxNameBytes:
		return fmt.Errorf("name is %d bytes, more than %d", len(name), maxNameBytes)
	case !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0:
		return errors.New("name is not UTF-8 text without NUL bytes")
	case ttl < MinTTL:
		return fmt.Errorf("TTL %v is shorter than %v", ttl, MinTTL)
	}
	return nil
}

// ttlTooShort refuses a TTL shorter than ttlRoundTrips of the fastest
// round trip measured, once rttSamples were.
func (m *Manager) ttlTooShort(ttl time.Duration) error {
	if rtt := time.Duration(m.rtt.Load()); m.rttN.Load() >= rttSamples && ttl < ttlRoundTrips*rtt {
		return fmt.Errorf("TTL %v is shorter than %d round trips (at least %v each, measured)", ttl, ttlRoundTrips, rtt)
	}
	return nil
}

// remeasure times one round trip (SELECT 1) and keeps it if it is the
// fastest. Before refusing a TTL by the round trips measured so far, the
// Manager measures once more: a refused acquisition sends nothing, so a
// Manager whose first round trips all came during a load spike would
// otherwise refuse that TTL for ever.
func (m *Manager) remeasure(ctx context.Context) {
	sent := time.Now()
	var one int
	if m.b.queryRow(ctx, "SELECT 1", nil, &one) == nil {
		m.observeRTT(time.Since(sent))
	}
}

// newOwner returns a random 128-bit owner id in UUID text form.
func newOwner() string {
	var b [16]byte
	crand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
