package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// Redlock takes locks on a majority of N independent Redis servers (the
// Redlock algorithm). It is safe for concurrent use.
type Redlock struct {
	base   ttllock.Base // the options, NewRedlock's error, the held locks' timers
	cs     []redis.UniversalClient
	quorum int
}

// NewRedlock returns a Redlock over clients: an odd number, at least 3, of
// clients of independent servers (masters with no replication between
// them). Configure each client so that a server that stops answering or
// is down costs an attempt no more than the algorithm allows:
// ContextTimeoutEnabled (commands end at their context's deadline),
// DialerRetries: 1 and MaxRetries: -1 (Redlock retries whole attempts
// itself; a SET retried after its reply was lost reads as a refusal).
//
// NewRedlock does not fail: a nil client, an even count or fewer than 3,
// or an invalid option is reported, as an error matching
// [sqlock.ErrNilHandle] or [sqlock.ErrInvalidOption], by every method.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) *Redlock {
	r := &Redlock{cs: append([]redis.UniversalClient(nil), clients...), quorum: len(clients)/2 + 1}
	cfg, err := buildConfig(opts)
	if err == nil {
		err = cfg.oneServerOnly()
	}
	r.base.Init(&kit, cfg.Config, newRedlockError(clients, err))
	return r
}

// newRedlockError is NewRedlock's error, if any.
func newRedlockError(clients []redis.UniversalClient, err error) error {
	if err != nil {
		return &Error{Op: "new", Cause: err}
	}
	if n := len(clients); n < 3 || n%2 == 0 {
		return &Error{Op: "new", Cause: errkind.New(sqlock.ErrInvalidOption,
			"redislock: Redlock needs an odd number of servers, at least 3, not %d", n)}
	}
	for i, c := range clients {
		if isNil(c) {
			return &Error{Op: "new", Cause: errkind.New(sqlock.ErrNilHandle, "redislock: nil client %d", i)}
		}
	}
	return nil
}

// Acquire takes the lock called key for ttl on a majority of the servers,
// waiting while it is held: after an attempt that does not get a majority
// within the validity (ttl less the time the attempt took and the drift
// allowance), it deletes what it got everywhere and tries again after a
// random pause, for at most the Redlock's timeout (WithTimeout) or ctx's
// deadline. A wait that runs out returns an error matching [ErrTimeout]
// (and [ErrNoQuorum] when the last attempt reached fewer than a majority of
// the servers).
//
// The lock is extended on a majority every ttl/3 until Release;
// [RedlockLock.Lost] fires when it can no longer be trusted.
func (r *Redlock) Acquire(ctx context.Context, key string, ttl time.Duration) (*RedlockLock, error) {
	return r.observed(ctx, "acquire", key, ttl, true)
}

// TryAcquire is Acquire with one attempt: if no majority was granted it
// returns an error matching [ErrNotAcquired], or [ErrNoQuorum] if fewer than
// a majority of the servers answered.
func (r *Redlock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*RedlockLock, error) {
	return r.observed(ctx, "tryacquire", key, ttl, false)
}

// observed is an acquisition, which the TTL-lock toolkit reports to the
// Redlock's observer. A single attempt is bounded by the lock's validity,
// not by WithTimeout.
func (r *Redlock) observed(ctx context.Context, op, key string, ttl time.Duration, wait bool) (*RedlockLock, error) {
	if r == nil {
		return nil, kit.NilHandle(op, key, "Redlock")
	}
	return ttllock.Acquire(ctx, &r.base, (*redlockStore)(r), ttllock.Request{Op: op, Name: key, TTL: ttl, Wait: wait},
		func() (*RedlockLock, *ttllock.Lock) {
			l := &RedlockLock{}
			return l, &l.tl
		})
}

// redlockStore is a Redlock seen by the TTL-lock toolkit: an attempt on
// every server, granted by a majority within the lock's validity.
type redlockStore Redlock

func (s *redlockStore) Check(key string, ttl time.Duration) (time.Duration, error) {
	return check(key, ttl)
}

// Grant is one attempt, with a fresh owner: a late command of an attempt
// given up (its clean-up's DEL, a SET that timed out) cannot touch the
// keys of the next. An attempt that fewer than a majority answered is
// refused with ErrNoQuorum, not reported as held.
func (s *redlockStore) Grant(ctx context.Context, key string, ttl time.Duration, _ bool) (ttllock.Grant, error) {
	r := (*Redlock)(s)
	srv := &majority{r: r, key: key, owner: newOwner(), ttl: ttl, last: make([]chan struct{}, len(r.cs))}
	sent := time.Now()
	granted, answered, err := srv.try(ctx)
	if granted >= r.quorum && time.Since(sent) < ttl-drift(ttl) {
		return ttllock.Grant{Held: srv}, nil
	}
	if granted > 0 || err != nil {
		srv.cleanUp() // a minority, a late majority, or answers lost
	}
	g := ttllock.Grant{Remaining: -1} // the servers' holders are not asked
	if answered < r.quorum {
		g.Refused = ttllock.Refuse(ErrNoQuorum, err)
	}
	return g, nil
}

// retakeScript extends the key where it is still the owner's, and sets it
// again where it is gone (a server that missed renewals while paused or
// unreachable, or restarted): safe, because the extension counts only
// while the lock is trusted, so a majority has held the owner's key
// without a gap and no one else can hold one.
var retakeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if not v and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0`)

// majority is a lock held on a majority of a Redlock's servers.
type majority struct {
	r     *Redlock
	key   string
	owner string
	ttl   time.Duration
	// last[i] is closed when the lock's latest command to server i has
	// ended: the next one waits for it. An acquisition, a renewal or a
	// release returns once a majority answered, and the others finish in
	// the background — a SET or renewal issued before a Release must not
	// land after its DEL, or the key would reappear there after Release
	// returned.
	mu   sync.Mutex
	last []chan struct{}
}

// next queues a command to server i behind the lock's earlier ones: it
// may run once prev is closed (nil: at once), and closes done when it ends.
func (m *majority) next(i int) (prev <-chan struct{}, done chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, done = m.last[i], make(chan struct{})
	m.last[i] = done
	return prev, done
}

// stepDivisor bounds each server's acquiring command to ttl/stepDivisor: a
// server that stops answering must not hold up an attempt for more than a
// part of the lock's validity (the algorithm's per-instance timeout). A
// renewal or a release returns once a majority answered, so its commands
// are bounded only by the TTL (and the caller's deadline).
const stepDivisor = 3

// each runs f on every server in parallel (a goroutine each), each bounded
// by bound and ctx's deadline, and returns how many said yes, how many said
// no, and the errors of the others. It returns as soon as a majority said
// yes, and when anyHow is set also as soon as too many said no (or failed)
// for one to, and at the bound even if a client ignores its context. Commands
// still out then finish in the background within their bound — a DEL
// still reaches a slow server — so a server that stops answering costs
// nothing while a majority answers. A failed acquisition waits for every
// answer (anyHow false): its clean-up must not overtake a SET still on its
// way, which would leave the key set until its TTL.
func (m *majority) each(ctx context.Context, anyHow bool, bound time.Duration, f func(context.Context, redis.UniversalClient) (bool, error)) (yes, no int, err error) {
	// The commands are detached from ctx's cancellation (not its
	// deadline), so that those left behind still arrive.
	parent := ctx
	until := time.Now().Add(bound)
	if d, ok := parent.Deadline(); ok && d.Before(until) {
		until = d
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(parent), until)
	type result struct {
		server int
		ok     bool
		err    error
	}
	n := len(m.r.cs)
	// The last command to finish ends the context: those left behind keep
	// their bound.
	var running atomic.Int32
	running.Store(int32(n))
	finished := func() {
		if running.Add(-1) == 0 {
			cancel()
		}
	}
	results := make(chan result, n) // the commands left behind never block
	for i, c := range m.r.cs {
		prev, done := m.next(i) // in the order the commands are issued
		go func() {
			defer finished()
			if prev != nil {
				<-prev
			}
			ok, err := f(ctx, c)
			close(done)
			results <- result{i, ok, err}
		}()
	}
	var errList []error
	for range n {
		var r result
		select {
		case r = <-results:
		case <-parent.Done():
			errList = append(errList, context.Cause(parent))
			return yes, no, errors.Join(errList...)
		case <-ctx.Done():
			if ctx.Err() == context.Canceled { // every command finished: its result is in
				r = <-results
				break
			}
			// The bound, even if a client ignores its context.
			errList = append(errList, fmt.Errorf("%d of %d servers did not answer within %v", n-yes-no-len(errList), n, bound))
			return yes, no, errors.Join(errList...)
		}
		switch {
		case r.err != nil && errors.Is(r.err, context.DeadlineExceeded):
			// The command's own bound, not a deadline of the caller's
			// (that one is reported as the caller's): it must not match
			// context.DeadlineExceeded.
			errList = append(errList, fmt.Errorf("server %d: no answer within %v", r.server, bound))
		case r.err != nil:
			errList = append(errList, fmt.Errorf("server %d: %w", r.server, r.err))
		case r.ok:
			yes++
		default:
			no++
		}
		if yes >= m.r.quorum || anyHow && no+len(errList) > n-m.r.quorum {
			break
		}
	}
	return yes, no, errors.Join(errList...)
}

// try is one acquisition attempt on every server, each command bounded by
// TTL/stepDivisor, which ends before the lock's validity.
func (m *majority) try(ctx context.Context) (granted, answered int, err error) {
	yes, no, err := m.each(ctx, false, m.ttl/stepDivisor, func(ctx context.Context, c redis.UniversalClient) (bool, error) {
		return c.SetNX(ctx, m.key, m.owner, m.ttl).Result()
	})
	return yes, yes + no, err
}

func (m *majority) Renew(ctx context.Context) (refused bool, err error) {
	yes, no, err := m.each(ctx, true, m.ttl, func(ctx context.Context, c redis.UniversalClient) (bool, error) {
		n, err := retakeScript.Run(ctx, c, []string{m.key}, m.owner, m.ttl.Milliseconds()).Int64()
		return n == 1, err
	})
	switch {
	case yes >= m.r.quorum:
		return false, nil
	case no > len(m.r.cs)-m.r.quorum:
		return true, nil // a majority can no longer be this holder's
	}
	return false, fmt.Errorf("%w (%d of %d confirmed): %w", ErrNoQuorum, yes, len(m.r.cs), err)
}

func (m *majority) Release(ctx context.Context) (notHeld bool, err error) {
	yes, no, err := m.each(ctx, false, m.ttl, func(ctx context.Context, c redis.UniversalClient) (bool, error) {
		n, err := releaseScript.Run(ctx, c, []string{m.key}, m.owner).Int64()
		return n == 1, err
	})
	switch {
	case yes >= m.r.quorum:
		return false, nil
	case no > len(m.r.cs)-m.r.quorum:
		return true, nil
	}
	return false, fmt.Errorf("%w (%d of %d confirmed, %d refused): %w", ErrNoQuorum, yes, len(m.r.cs), no, err)
}

func (m *majority) cleanUp() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	m.Release(ctx)
}

// RedlockLock is a lock held on a majority of a Redlock's servers. It has
// no fencing token: the servers share no counter, and a token minted on a
// majority can repeat after a server restarts without its data (see the
// package doc), so it is a [sqlock.Lock] but not a [sqlock.Fenced]. Its
// methods are safe for concurrent use.
type RedlockLock struct {
	hold
}

var _ sqlock.Lock = (*RedlockLock)(nil)

// Release deletes the lock on every server where it is still this
// holder's: nil if a majority confirmed, [ErrNotHeld] if too few had it for
// a majority or Release already ran, otherwise the servers' errors.
func (l *RedlockLock) Release(ctx context.Context) error {
	if l == nil {
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}
