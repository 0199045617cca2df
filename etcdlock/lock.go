package etcdlock

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// drift is the allowance for the client's and the leader's clocks running
// at different rates: 1% of the TTL plus 2 ms. A lock is trusted locally
// until ttl − drift after the request that granted or last kept alive its
// lease was sent; the cluster expires it no earlier than its TTL after the
// leader received that request.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Keepalive retries: a failed keepalive is tried again after a pause that
// doubles from retryMin to retryMax, while the lock is still trusted.
const (
	retryMin = 10 * time.Millisecond
	retryMax = 200 * time.Millisecond
)

// Lock is a lock held on an etcd cluster: a key under the lock's name
// attached to a lease of its own, with a fencing token. Its methods are
// safe for concurrent use.
type Lock struct {
	tl ttllock.Lock
}

// A Lock is a [sqlock.Lock] with a fencing token.
var _ sqlock.Fenced = (*Lock)(nil)

// held is a granted lock's lease seen by package internal/ttllock: a
// renewal is one keepalive of the lease, a release its revocation (which
// deletes the key with it).
type held struct {
	c     *clientv3.Client
	key   string
	lease clientv3.LeaseID
}

func (h *held) Renew(ctx context.Context) (refused bool, err error) {
	_, err = h.c.KeepAliveOnce(clientv3.WithRequireLeader(ctx), h.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return true, errors.New("the cluster no longer has the lock's lease (it expired)")
	}
	return false, err
}

func (h *held) Release(ctx context.Context) (notHeld bool, err error) {
	_, err = h.c.Revoke(ctx, h.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return true, nil
	}
	return false, err
}

// Token is the lock's fencing token: the create revision of its key,
// which etcd's Raft log orders across the whole cluster — every later
// holder's is greater, through leader changes, member failures and
// restarts of the cluster with its data. Write it beside the data the
// lock protects and refuse writes that carry a smaller one.
func (l *Lock) Token() int64 { return l.tl.Token() }

// Name is the lock's name.
func (l *Lock) Name() string { return l.tl.Name() }

// Key is the lock's key in etcd.
func (l *Lock) Key() string {
	switch h := l.tl.Held().(type) {
	case *held:
		return h.key
	case *sharedHeld:
		return h.key
	}
	return ""
}

// Deadline is the local time until which the lock is trusted: when the
// request that granted or last kept alive its lease was sent, plus the
// TTL, less the drift allowance (1% of the TTL plus 2 ms). Lost fires then
// unless a keepalive moves it.
func (l *Lock) Deadline() time.Time { return l.tl.Deadline() }

// Lost returns a channel that is closed when the lock can no longer be
// trusted: the cluster no longer has its lease, or no keepalive was
// confirmed before Deadline — which is before the cluster can expire the
// lease, by the drift allowance. A Release never closes it.
func (l *Lock) Lost() <-chan struct{} { return l.tl.Lost() }

// Err is nil while the lock is trusted, and then an error matching
// [ErrLost] that says why.
func (l *Lock) Err() error { return l.tl.Err() }

// Context returns a context derived from parent that ends when the lock is
// lost (its cause then matches [ErrLost]) or cancel is called, and that
// carries the lock's fencing token ([sqlock.WithFencingToken]): the fenced
// writes of versioned, sqlxhelpers and gormplugin made with it are refused
// by PostgreSQL once a newer holder has written. Call cancel when done.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.tl.Context(parent)
}

// Release stops the keepalives and revokes the lock's lease, which
// deletes its key, detached from ctx's cancellation with a bound of its
// own, so a cancelled request still releases. It returns nil if the
// cluster confirmed; an error matching [ErrNotHeld] if the lease had
// expired (nothing changed) or Release already ran; otherwise etcd's error
// (the lease then expires by its TTL).
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}
