package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/nilcheck"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// The TTLs a lock may have. etcd counts a lease's TTL in whole seconds
// (a shorter TTL is rounded up, and the server grants at least 1.5 of its
// election timeouts: 2 s with etcd's defaults), and refuses one above
// 9,000,000,000 s.
const (
	MinTTL = time.Second
	MaxTTL = 9_000_000_000 * time.Second
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 1024

// Locker takes locks on an etcd cluster. It is safe for concurrent use;
// make one per client and share it.
type Locker struct {
	base   ttllock.Base // the options, New's error, the held locks' timers
	c      *clientv3.Client
	prefix string
	shared *leases // WithSharedLease: the leases its locks share; nil: a lease per lock
}

// New returns a Locker on client.
//
// New does not fail: a nil client or an invalid option is reported, as an
// error matching [sqlock.ErrNilHandle] or [sqlock.ErrInvalidOption], by
// every acquisition.
func New(client *clientv3.Client, opts ...Option) *Locker {
	lk := &Locker{c: client}
	cfg, err := buildConfig(opts)
	switch {
	case err != nil:
		err = &Error{Op: "new", Cause: err}
	case nilcheck.Is(client):
		err = &Error{Op: "new", Cause: errkind.New(sqlock.ErrNilHandle, "etcdlock: nil client")}
	}
	lk.base.Init(&kit, cfg.Config, err)
	lk.prefix = cfg.prefix
	if cfg.sharedLease {
		lk.shared = &leases{}
	}
	return lk
}

// Acquire takes the lock called name for ttl, waiting in line while
// someone else holds it, for at most the Locker's timeout (WithTimeout) or
// ctx's deadline, whichever is first. A wait that runs out returns an
// error matching [ErrTimeout]; a waiter that gives up (its context ended)
// has left the line before Acquire returns.
//
// Waiters are served in the order they arrived (their keys' create
// revisions), and each watches only the one before it, so a release wakes
// one waiter. The lock's lease is kept alive every ttl/3 until Release;
// [Lock.Lost] fires when it can no longer be trusted.
func (lk *Locker) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lock, error) {
	return lk.acquire(ctx, "acquire", name, ttl, true)
}

// TryAcquire is Acquire without the wait: if the lock is held (or anyone
// waits for it) it returns an error matching [ErrNotAcquired] at once. It
// takes the lock in one transaction, after granting its lease.
func (lk *Locker) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*Lock, error) {
	return lk.acquire(ctx, "tryacquire", name, ttl, false)
}

// acquire is one acquisition, through the toolkit (package
// internal/ttllock), with the Locker as its Store.
func (lk *Locker) acquire(ctx context.Context, op, name string, ttl time.Duration, wait bool) (*Lock, error) {
	if lk == nil {
		return nil, kit.NilHandle(op, name, "Locker")
	}
	r := ttllock.Request{Op: op, Name: name, TTL: ttl, Wait: wait}
	return ttllock.Acquire(ctx, &lk.base, (*store)(lk), r, func() (*Lock, *ttllock.Lock) {
		l := &Lock{}
		return l, &l.tl
	})
}

// store is a Locker seen by the toolkit.
//
// Round trips: LeaseGrant, then one Txn that puts the caller's key and
// reads its predecessor; TryAcquire's Txn puts the key only if the name
// has none. A waiter then watches its predecessor and, when it is deleted,
// reads (one Txn, which also checks that its own key still stands) the
// next one.
type store Locker

// Check refuses bad input before anything is sent.
func (*store) Check(name string, ttl time.Duration) (time.Duration, error) {
	switch {
	case name == "":
		return 0, errors.New("empty name")
	case len(name) > MaxNameLen:
		return 0, fmt.Errorf("name of %d bytes is longer than %d", len(name), MaxNameLen)
	case ttl < MinTTL || ttl > MaxTTL:
		return 0, fmt.Errorf("TTL %v is outside [%v, %v] (etcd's leases are whole seconds)", ttl, MinTTL, MaxTTL)
	}
	return ttl, nil
}

// Grant writes the caller's key and, when wait, waits in line until it is
// the oldest. A request that failed (a cluster without a leader) is a
// refusal: Acquire pauses (the toolkit's backoff) and tries again within
// its bound, TryAcquire reports it.
func (s *store) Grant(ctx context.Context, name string, ttl time.Duration, wait bool) (ttllock.Grant, error) {
	// A member without a leader refuses at once instead of queueing the
	// request until its own timeout.
	ctx = clientv3.WithRequireLeader(ctx)
	prefix := s.prefix + url.PathEscape(name) + "/"
	secs := int64(math.Ceil(ttl.Seconds()))
	q, err := s.enqueue(ctx, prefix, secs, ttl, wait)
	switch {
	case err != nil && ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		return ttllock.Grant{}, err // the context's end itself, which the toolkit reports
	case err != nil:
		return ttllock.Grant{Remaining: -1, Refused: ttllock.Refuse(nil, err)}, nil
	case q.notAcquired:
		return ttllock.Grant{Remaining: -1}, nil
	}
	sent := q.sent
	if q.pred != nil {
		w := newWaiter(s.c, q.lease, ttl, sent)
		if err := w.wait(ctx, prefix, q.key, q.rev, q.pred, q.rev); err != nil {
			if q.shared != nil && errors.Is(err, rpctypes.ErrLeaseNotFound) {
				q.shared.drop() // the next acquisition grants another
			}
			s.giveBack(q.lease, q.key) // leave the line at once
			return ttllock.Grant{}, err
		}
		sent = w.sent
	}
	if q.shared != nil {
		return ttllock.Grant{Held: &sharedHeld{c: s.c, key: q.key, rev: q.rev, lease: q.shared}, Token: q.rev, Sent: sent}, nil
	}
	return ttllock.Grant{Held: &held{c: s.c, key: q.key, lease: q.lease}, Token: q.rev, Sent: sent}, nil
}

// queued is a key enqueue wrote: its lease (shared, if the Locker shares
// them), the key and its create revision, its predecessor (nil: it holds
// the lock), and when the request that starts its trust was sent.
type queued struct {
	lease       clientv3.LeaseID
	shared      *sharedLease
	key         string
	rev         int64
	pred        []byte
	sent        time.Time
	notAcquired bool
}

// enqueue grants a lease (or takes the Locker's shared one) and writes
// the caller's key under prefix with it. wait: the key joins the line,
// and pred is its predecessor (seen at the key's create revision), nil if
// it holds the lock; otherwise the key is written only if prefix has none
// (notAcquired if it had). A lease of its own that holds no key when
// enqueue returns is revoked; a key on a shared lease whose answer was
// lost is deleted.
func (s *store) enqueue(ctx context.Context, prefix string, secs int64, ttl time.Duration, wait bool) (q queued, err error) {
	if s.shared != nil {
		if q.shared, q.sent, err = s.shared.lease(ctx, s.c, secs, ttl); err != nil {
			return q, err
		}
		q.lease, q.key = q.shared.id, s.shared.key(prefix, q.shared)
	} else {
		q.sent = time.Now()
		g, err := s.c.Grant(ctx, secs)
		if err != nil {
			return q, err
		}
		q.lease, q.key = g.ID, fmt.Sprintf("%s%016x", prefix, int64(g.ID))
	}
	put := clientv3.OpPut(q.key, "", clientv3.WithLease(q.lease))
	txn := s.c.Txn(ctx)
	if wait {
		txn = txn.Then(clientv3.OpGet(prefix, clientv3.WithLastCreate()...), put)
	} else {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(prefix), "=", 0).WithPrefix()).Then(put)
	}
	resp, err := txn.Commit()
	switch {
	case err != nil:
		if q.shared != nil && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			q.shared.drop() // revoked or expired: the next attempt grants another
		}
		s.giveBack(q.lease, q.key) // the answer may be lost, not the write
		return queued{}, err
	case !resp.Succeeded:
		s.giveBack(q.lease, "")
		return queued{notAcquired: true}, nil
	}
	q.rev = resp.Header.Revision
	if wait {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			q.pred = kvs[0].Key
		}
	}
	return q, nil
}

// giveBack undoes an acquisition that holds no lock: a lease of its own is
// revoked (its key, if the cluster wrote it, goes with it); on the
// Locker's shared lease, which its other locks hold too, only the key is
// deleted ("": none was written).
func (s *store) giveBack(lease clientv3.LeaseID, key string) {
	switch {
	case s.shared == nil:
		s.revoke(lease)
	case key != "":
		deleteKey(s.c, key, 0)
	}
}

// revoke gives back a lease that holds no lock (a refused try, a waiter
// that gave up, a request whose answer was lost): its key, if the cluster
// wrote it, goes with it. Detached from the acquisition's context, with a
// bound of its own; if it fails the lease expires by its TTL.
func (s *store) revoke(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), ttllock.ReleaseTimeout)
	defer cancel()
	s.c.Revoke(ctx, lease)
}

// waiter is an acquisition in line: its key is written; it keeps its
// lease alive while it waits.
type waiter struct {
	c     *clientv3.Client
	lease clientv3.LeaseID
	ttl   time.Duration
	sent  time.Time // when the last confirmed grant or keepalive was sent
	next  time.Time // when the next keepalive is due

	// keepAlive sends one keepalive of the lease: the client's
	// KeepAliveOnce, or a fake in the tests of the keepalives' timing.
	keepAlive func(ctx context.Context, lease clientv3.LeaseID) error
}

// newWaiter returns the waiter of lease, granted for ttl by a request
// sent at sent; its first keepalive is due ttl/3 after that.
func newWaiter(c *clientv3.Client, lease clientv3.LeaseID, ttl time.Duration, sent time.Time) *waiter {
	return &waiter{c: c, lease: lease, ttl: ttl, sent: sent, next: sent.Add(ttl / 3),
		keepAlive: func(ctx context.Context, lease clientv3.LeaseID) error {
			_, err := c.KeepAliveOnce(ctx, lease)
			return err
		}}
}

// retryPause is the pause before a request of the wait that failed is
// tried again.
const retryPause = 50 * time.Millisecond

// wait returns once key (created at rev) is the oldest under prefix: it
// watches its predecessor pred (seen at revision seen) until it is
// deleted, then reads the next one, until there is none. It fails if its
// own key is gone (its lease expired while it waited) or ctx ends.
func (w *waiter) wait(ctx context.Context, prefix, key string, rev int64, pred []byte, seen int64) error {
	for {
		if err := w.watchDelete(ctx, pred, seen); err != nil {
			return err
		}
		for {
			resp, err := w.c.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
				Then(clientv3.OpGet(prefix, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...)).
				Commit()
			if err == nil {
				if !resp.Succeeded {
					return errors.New("the waiter's key is gone: its lease expired while it waited")
				}
				kvs := resp.Responses[0].GetResponseRange().Kvs
				if len(kvs) == 0 {
					return nil // the oldest: the lock is ours
				}
				pred, seen = kvs[0].Key, resp.Header.Revision
				break
			}
			if _, _, err := w.sleep(ctx, nil); err != nil {
				return err
			}
		}
	}
}

// watchDelete waits until key is deleted after revision seen, keeping the
// lease alive meanwhile. A watch that breaks (its member lost the leader
// or died) is made again from the same revision.
func (w *waiter) watchDelete(ctx context.Context, key []byte, seen int64) error {
	for {
		wctx, cancel := context.WithCancel(ctx)
		wch := w.c.Watch(wctx, string(key), clientv3.WithRev(seen+1), clientv3.WithFilterPut())
		deleted, broken, err := w.events(ctx, wch)
		cancel()
		switch {
		case err != nil:
			return err
		case deleted || errors.Is(broken, rpctypes.ErrCompacted):
			return nil // gone, or its history is: the caller reads the line again
		}
		if _, _, err := w.sleep(ctx, nil); err != nil {
			return err
		}
	}
}

// events reads wch until a delete or the watch's end (broken says why),
// keeping the lease alive; err is the end of ctx or of the lease.
func (w *waiter) events(ctx context.Context, wch clientv3.WatchChan) (deleted bool, broken, err error) {
	for {
		resp, ok, err := w.sleep(ctx, wch)
		switch {
		case err != nil:
			return false, nil, err
		case !ok:
			return false, errors.New("watch ended"), nil
		case resp.Err() != nil:
			return false, resp.Err(), nil
		}
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				return true, nil, nil
			}
		}
	}
}

// sleep waits for a response of ch, or (ch nil) for retryPause, sending
// the lease's keepalives as they fall due (every ttl/3). It fails when ctx
// ends or the lease can no longer be kept.
func (w *waiter) sleep(ctx context.Context, ch clientv3.WatchChan) (resp clientv3.WatchResponse, ok bool, err error) {
	var retry <-chan time.Time
	if ch == nil {
		t := time.NewTimer(retryPause)
		defer t.Stop()
		retry = t.C
	}
	for {
		due := time.NewTimer(time.Until(w.next))
		select {
		case <-ctx.Done():
			due.Stop()
			return resp, false, ctx.Err()
		case <-retry:
			due.Stop()
			return resp, false, nil
		case resp, ok = <-ch:
			due.Stop()
			return resp, ok, nil
		case <-due.C:
			if err := w.renew(ctx); err != nil {
				return resp, false, err
			}
		}
	}
}

// renew sends one keepalive of the waiter's lease.
func (w *waiter) renew(ctx context.Context) error {
	sent := time.Now()
	kctx, cancel := context.WithDeadline(ctx, w.sent.Add(w.ttl))
	err := w.keepAlive(kctx, w.lease)
	cancel()
	switch {
	case err == nil:
		w.sent, w.next = sent, sent.Add(w.ttl/3)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("the waiter's lease expired while it waited: %w", err)
	case ctx.Err() != nil:
		return ctx.Err()
	case !time.Now().Before(w.sent.Add(w.ttl)):
		// The deadline that ran out is the lease's, not the caller's: the
		// error must not match context.DeadlineExceeded.
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no keepalive of the waiter's lease confirmed within its TTL (%v)", err)
		}
		return fmt.Errorf("no keepalive of the waiter's lease confirmed within its TTL: %w", err)
	default:
		w.next = time.Now().Add(retryPause)
	}
	return nil
}
