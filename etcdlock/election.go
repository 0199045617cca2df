package etcdlock

import (
	"context"
	"errors"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/election"
	"github.com/sqlock/sqlock/internal/errkind"
)

// ErrNoLeader: nobody leads the election (no key under its name, or the
// oldest one's holder has not announced itself yet). It matches
// [sqlock.ErrNoLeader].
var ErrNoLeader = errkind.New(sqlock.ErrNoLeader, "etcdlock: no leader")

// MaxIdentityBytes is the longest candidate identity ([Locker.Candidate]).
const MaxIdentityBytes = election.MaxIdentityBytes

// Candidate is one candidate in the election called name, on the lock of
// that name: candidates queue as the lock's waiters do (keys under the
// name, ordered by create revision, each watching its predecessor), the
// leader is the lock's holder, its term the key's create revision, and
// its identity the key's value, written once it holds the lock — what
// etcd's concurrency.Election calls proclaiming. Make it with
// [Locker.Candidate]; it is safe for concurrent use.
type Candidate struct {
	lk       *Locker
	name     string
	identity string
	ttl      time.Duration
	err      error // the input's refusal, returned by every method
}

// Candidate returns a candidate called identity (a host, a pid, a job id:
// what the other candidates read as the leader's, [MaxIdentityBytes] of
// UTF-8 text at most) in the election called name, whose leadership is a
// lock of ttl. A bad name, identity or TTL is an error matching
// [ErrInvalid] (and [sqlock.ErrInvalidArgument]) from every method, with
// nothing sent.
//
// The election shares its name with the Locker's locks: an Acquire of
// name takes the leadership too (without announcing an identity).
func (lk *Locker) Candidate(name, identity string, ttl time.Duration) *Candidate {
	c := &Candidate{lk: lk, name: name, identity: identity, ttl: ttl}
	switch {
	case lk == nil:
		c.err = kit.NilHandle("campaign", name, "Locker")
		return c
	case lk.base.Err() != nil:
		c.err = lk.base.Err()
		return c
	}
	_, err := (*store)(lk).Check(name, ttl)
	if err == nil {
		err = election.CheckIdentity(identity)
	}
	if err != nil {
		c.err = &Error{Op: "campaign", Name: name, Err: ErrInvalid, Cause: err}
	}
	return c
}

// Election is c as a [sqlock.Election], for code that also runs on other
// backends.
func (c *Candidate) Election() sqlock.Election { return election.Adapt[*Leadership](c) }

// Leadership is a won election: the lock on the election's name (its
// Token is the term), with the identity it announced.
type Leadership struct {
	*Lock
	identity string
}

// A Leadership is a sqlock.Leadership.
var _ sqlock.Leadership = (*Leadership)(nil)

// Identity is the identity the leader announced.
func (l *Leadership) Identity() string { return l.identity }

// Resign ends the leadership: the lock's Release, which deletes its key,
// so that the next candidate in line wins at once.
func (l *Leadership) Resign(ctx context.Context) error {
	if l == nil || l.Lock == nil {
		return kit.NilRelease()
	}
	return l.Release(ctx)
}

// prefix is the key prefix of the lock called name.
func (c *Candidate) prefix() string { return c.lk.prefix + url.PathEscape(c.name) + "/" }

// Campaign waits in line until c leads, for as long as ctx allows (the
// Locker's WithTimeout bounds each wait in line, not the campaign), then
// writes c's identity into its key — only if the key still stands, so a
// deposed leader announces nothing — and returns the leadership. Leader
// reports nobody until then: a leader is one whose Campaign has returned.
//
// The leadership's lease is kept alive every ttl/3; Lost fires when it
// can no longer be trusted, before the cluster can expire the lease and
// let the next candidate win.
func (c *Candidate) Campaign(ctx context.Context) (*Leadership, error) {
	if c.err != nil {
		return nil, c.err
	}
	l, err := election.Campaign(ctx, func(ctx context.Context) (*Lock, error) {
		return c.lk.Acquire(ctx, c.name, c.ttl)
	})
	if err != nil {
		return nil, err
	}
	key := l.Key()
	resp, err := c.lk.c.Txn(clientv3.WithRequireLeader(ctx)).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", l.Token())).
		Then(clientv3.OpPut(key, c.identity, clientv3.WithIgnoreLease())).
		Commit()
	switch {
	case err != nil:
		l.Release(ctx)
		return nil, &Error{Op: "campaign", Name: c.name, Err: election.Ended(ctx, ErrTimeout), Cause: err}
	case !resp.Succeeded:
		l.Release(ctx)
		return nil, &Error{Op: "campaign", Name: c.name, Err: ErrLost,
			Cause: errors.New("the lock's key was gone before the leader could announce itself")}
	}
	return &Leadership{Lock: l, identity: c.identity}, nil
}

// Leader returns the current leader's identity and term: the value and
// create revision of the oldest key under the election's name, once its
// holder has announced itself. Nobody leading is an error matching
// [ErrNoLeader].
func (c *Candidate) Leader(ctx context.Context) (identity string, term int64, err error) {
	l, err := c.leader(ctx)
	return l.Identity, l.Term, err
}

func (c *Candidate) leader(ctx context.Context) (sqlock.Leader, error) {
	if c.err != nil {
		return sqlock.Leader{}, c.err
	}
	if ctx == nil {
		return sqlock.Leader{}, &Error{Op: "leader", Name: c.name, Cause: errkind.New(sqlock.ErrNilHandle, "etcdlock: nil context")}
	}
	resp, err := c.lk.c.Get(ctx, c.prefix(), clientv3.WithFirstCreate()...)
	if err != nil {
		return sqlock.Leader{}, &Error{Op: "leader", Name: c.name, Cause: err}
	}
	if len(resp.Kvs) == 0 || len(resp.Kvs[0].Value) == 0 {
		return sqlock.Leader{}, &Error{Op: "leader", Name: c.name, Err: ErrNoLeader}
	}
	kv := resp.Kvs[0]
	return sqlock.Leader{Identity: string(kv.Value), Term: kv.CreateRevision}, nil
}

// observeSafety bounds how long Observe trusts its watch: it reads the
// leader again at least this often, in case the watch broke silently.
const observeSafety = time.Second

// Observe returns a channel that receives the current leader at once and
// then each change (a zero sqlock.Leader: nobody leads), until ctx ends;
// then it is closed. It watches the keys under the election's name and
// reads the leader again at each change (and every second, should the
// watch break).
func (c *Candidate) Observe(ctx context.Context) (<-chan sqlock.Leader, error) {
	if c.err != nil {
		return nil, c.err
	}
	if ctx == nil {
		return nil, &Error{Op: "observe", Name: c.name, Cause: errkind.New(sqlock.ErrNilHandle, "etcdlock: nil context")}
	}
	// The watch starts before the first read, so no change after the
	// read goes unseen.
	watch := func() clientv3.WatchChan {
		return c.lk.c.Watch(clientv3.WithRequireLeader(ctx), c.prefix(), clientv3.WithPrefix())
	}
	wch := watch()
	return election.Observe(ctx, c.leader, func(ctx context.Context) error {
		t := time.NewTimer(observeSafety)
		defer t.Stop()
		select {
		case resp, ok := <-wch:
			if ok && resp.Err() == nil {
				return nil
			}
			// A broken watch (no leader, a member gone) is made again
			// after a pause, so that an outage is not a busy loop.
			pause := time.NewTimer(retryPause)
			defer pause.Stop()
			select {
			case <-pause.C:
			case <-ctx.Done():
				return ctx.Err()
			}
			if !ok {
				wch = watch()
			}
		case <-t.C:
		case <-ctx.Done():
		}
		return ctx.Err()
	}), nil
}
