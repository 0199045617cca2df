package lease

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
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
	base ttllock.Base // the options, New's error, the held leases' timers
	b    backend
	cfg  config
	stmt statements
	ntf  *notifier // nil when polling

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
	var err error
	m.cfg, err = buildConfig(opts)
	if err != nil {
		m.base.Init(&kit, m.cfg.Config, &Error{Op: "new", Cause: err})
		return m
	}
	m.b = newBackend(db)
	if m.b == nil {
		m.base.Init(&kit, m.cfg.Config, &Error{Op: "new", Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil database handle")})
		return m
	}
	m.base.Init(&kit, m.cfg.Config, nil)
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
// error matching [ErrTimeout]. Waiters are served in the order they
// arrived (the order of their tickets in the waiters' table, across
// processes); one that stops waiting leaves the queue before Acquire
// returns.
//
// The lease is renewed every ttl/3 until Release; [Lease.Lost] fires when
// it can no longer be trusted.
func (m *Manager) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	return m.observed(ctx, "acquire", name, ttl, true)
}

// TryAcquire is Acquire without the wait: if the lease is held, or
// waiters queue for it (a released lease is kept for the first of them),
// it returns an error matching [ErrNotAcquired] at once; it takes no place
// in the queue. (If the lease just expired
// while its old holder's guarded transaction is still open, the attempt
// waits for that transaction, within the Manager's timeout.)
func (m *Manager) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	return m.observed(ctx, "tryacquire", name, ttl, false)
}

// observed is an acquisition, which the TTL-lock toolkit reports to the
// Manager's observer.
func (m *Manager) observed(ctx context.Context, op, name string, ttl time.Duration, wait bool) (*Lease, error) {
	if m == nil {
		return nil, kit.NilHandle(op, name, "Manager")
	}
	return m.acquire(ctx, op, name, ttl, wait)
}

// acquire takes the lease through the TTL-lock toolkit.
func (m *Manager) acquire(ctx context.Context, op, name string, ttl time.Duration, wait bool) (*Lease, error) {
	a := &acquisition{m: m, owner: newOwner(), listen: m.ntf != nil}
	defer a.close()
	return ttllock.Acquire(ctx, &m.base, a, ttllock.Request{Op: op, Name: name, TTL: ttl, Wait: wait},
		func() (*Lease, *ttllock.Lock) {
			l := &Lease{a: a}
			return l, &l.tl
		})
}

// acquisition is one acquisition of a lease: its owner id, which every
// attempt, renewal and release carries, and its wait for a release's
// notification. To the TTL-lock toolkit it is the store (a ttllock.Store
// and Pauser) and, once granted, the lease's server side (ttllock.Held).
type acquisition struct {
	m      *Manager
	name   string
	owner  string
	ttl    time.Duration
	sub    *subscription // the notifications awaited, once subscribed
	listen bool          // subscribe before the next pause

	// The queue, as the last attempt answered: the waiter's ticket (0:
	// none), how many live tickets are ahead of it, and the nearest.
	ticket, ahead, pred int64
	queued              bool // a ticket may be on the server: give it back unless granted
	granted             bool
}

// close ends the acquisition's wait: its subscription, and its ticket if
// it was not granted (a waiter whose context ended leaves the queue before
// Acquire returns, and the waiter behind it is woken).
func (a *acquisition) close() {
	a.sub.close()
	if a.queued && !a.granted {
		a.m.leave(a.name, a.owner)
	}
}

// Check refuses bad input before anything is sent.
func (a *acquisition) Check(name string, ttl time.Duration) (time.Duration, error) {
	return ttl, a.m.check(name, ttl)
}

// Admit refuses a TTL too short for the round trips measured, after
// measuring once more.
func (a *acquisition) Admit(ctx context.Context, ttl time.Duration) error {
	if a.m.ttlTooShort(ttl) != nil {
		a.m.remeasure(ctx)
		if err := a.m.ttlTooShort(ttl); err != nil {
			return ttllock.Refuse(ErrTTLTooShort, err)
		}
	}
	return nil
}

// Grant is one attempt; a failed one gives back what the server may have
// granted.
func (a *acquisition) Grant(ctx context.Context, name string, ttl time.Duration, wait bool) (ttllock.Grant, error) {
	a.name, a.ttl = name, ttl
	var ticketTTL time.Duration
	if wait {
		ticketTTL = a.m.ticketTTL()
		a.queued = true
	}
	if wait && a.ahead >= headPollers {
		// Behind others: ask for the place only, and make an attempt
		// once next to the head.
		err := a.m.b.queryRow(ctx, a.m.stmt.place, []any{name, a.owner, ticketTTL.Microseconds()}, &a.ahead, &a.pred)
		if err != nil {
			return ttllock.Grant{}, schemaError(a.m.cfg.table, err)
		}
		if a.ahead >= headPollers {
			return ttllock.Grant{Remaining: -1}, nil
		}
	}
	sent := time.Now()
	r, err := a.m.try(ctx, name, a.owner, ttl, ticketTTL)
	if err != nil {
		a.m.cleanUp(name, a.owner)
		return ttllock.Grant{}, schemaError(a.m.cfg.table, err)
	}
	a.m.observeRTT(time.Since(sent))
	a.ticket, a.ahead, a.pred = r.ticket, r.ahead, r.pred
	if r.token > 0 {
		a.granted = true
		return ttllock.Grant{Held: a, Token: r.token}, nil
	}
	return ttllock.Grant{Remaining: time.Duration(r.remaining) * time.Microsecond}, nil
}

// Pause waits for the next attempt. A waiter at the head of the queue
// waits for the lease's release; one behind it, for the ticket ahead of it
// to leave (granted, or given back), which wakes nobody else. A listening
// waiter subscribes to the notification it awaits whenever that changes
// and then tries again at once: what happened between the failed try and
// the LISTEN is seen by the try, what happens after by the notification.
func (a *acquisition) Pause(ctx context.Context, remaining time.Duration) error {
	key := a.name
	if a.ahead > 0 {
		key = ticketKey(a.pred)
	}
	if a.sub != nil && (a.sub.dead.Load() || a.sub.name != key) {
		a.sub.close()
		a.sub = nil
	}
	if a.sub == nil && a.listen {
		s, err := a.m.ntf.subscribe(ctx, key)
		if err == nil {
			a.sub = s
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.listen = false // this wait polls
	}
	return a.m.pause(ctx, a.sub, remaining, a.ahead)
}

// ticketKey is the notification a ticket's leaving the queue sends: "#"
// and the ticket. A lease whose name has that form wakes that ticket's
// successor for nothing when it is released, which costs it one try.
func ticketKey(ticket int64) string { return "#" + strconv.FormatInt(ticket, 10) }

// Renew extends the lease by its TTL, owner-checked.
func (a *acquisition) Renew(ctx context.Context) (refused bool, err error) {
	sent := time.Now()
	var token int64
	err = a.m.b.queryRow(ctx, a.m.stmt.renew, []any{a.name, a.owner, a.ttl.Microseconds()}, &token)
	switch {
	case err == nil:
		a.m.observeRTT(time.Since(sent))
		return false, nil
	case errors.Is(err, errNoRows):
		return true, nil
	}
	return permanent(err), err
}

// Release ends the lease now, owner-checked, and wakes waiters.
func (a *acquisition) Release(ctx context.Context) (notHeld bool, err error) {
	var one int
	err = a.m.b.queryRow(ctx, a.m.stmt.release, []any{a.name, a.owner}, &one)
	if errors.Is(err, errNoRows) {
		return true, nil
	}
	return false, err
}

// attempt is the answer to one attempt: the lease's token if it was
// granted (0 if not), the time the current holder has left in µs (-1:
// unknown), and the caller's place in the queue: its ticket (0: none),
// how many live tickets are ahead and the nearest of them.
type attempt struct {
	token, remaining, ticket, ahead, pred int64
}

// try is one attempt; a ticketTTL > 0 queues the caller if it is not
// granted (or keeps its ticket alive that long).
func (m *Manager) try(ctx context.Context, name, owner string, ttl, ticketTTL time.Duration) (r attempt, err error) {
	args := []any{name, owner, ttl.Microseconds(), ticketTTL.Microseconds(), m.cfg.holder, m.cfg.payload}
	for range vanishedRetries {
		err = m.b.queryRow(ctx, m.stmt.acquire, args, &r.token, &r.remaining, &r.ticket, &r.ahead, &r.pred)
		if !vanished(err) {
			break
		}
	}
	return r, err
}

// ticketTTL is how long a waiter's ticket lives unless the waiter's next
// attempt renews it: four of its longest pauses, so that a live waiter
// keeps its place on a loaded machine and a dead one holds up the queue
// only that long.
func (m *Manager) ticketTTL() time.Duration {
	longest := max(m.safetyPoll(), m.cfg.poll, defaultPoll)
	return 4 * longest
}

// leave gives back a waiter's ticket, bounded as cleanUp is, detached from
// the caller's context (which has often ended: that is why it leaves).
func (m *Manager) leave(name, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var n int64
	m.b.queryRow(ctx, m.stmt.leave, []any{name, owner}, &n)
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
//
// ahead is how many live tickets are ahead of the waiter's. One behind
// others waits for the ticket ahead of it to leave, so the holder's expiry
// is not its business. A polling waiter at the head of the queue, or next
// to it, polls four times as often as the others: a release is noticed only
// by the head's poll, and the next in line becomes the head then.
func (m *Manager) pause(ctx context.Context, sub *subscription, remaining time.Duration, ahead int64) error {
	d := m.safetyPoll()
	if sub == nil {
		interval := m.cfg.poll
		if interval == 0 {
			interval = defaultPoll
		}
		if ahead < headPollers {
			interval /= 4
		}
		d = interval/2 + rand.N(interval/2+1)
	}
	switch {
	case ahead > 0:
	case remaining > 0:
		d = min(d, remaining+expiryGrace+rand.N(expiryGrace))
	case remaining == 0 || remaining < 0 && sub != nil:
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

func (m *Manager) safetyPoll() time.Duration {
	if m.safety > 0 {
		return m.safety
	}
	return safetyPoll
}

func (m *Manager) woke(notified bool) {
	if m.onWake != nil {
		m.onWake(notified)
	}
}

// headPollers is how many polling waiters at the front of a queue poll
// at a quarter of the interval.
const headPollers = 2

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
