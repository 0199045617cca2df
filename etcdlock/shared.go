package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock/internal/ttllock"
)

// leases are the leases a Locker made WithSharedLease shares among its
// locks: one per TTL (in whole seconds), granted when none is trusted for
// at least half its TTL more, kept alive by its locks' keepalives, and
// given up when the cluster no longer has it.
type leases struct {
	mu    sync.Mutex
	byTTL map[int64]*sharedLease
	seq   atomic.Uint64 // makes each acquisition's key its own on a shared lease
}

// sharedLease is one shared lease: its id and when the last request that
// the cluster confirmed for it (its grant, a keepalive) was sent.
type sharedLease struct {
	id clientv3.LeaseID

	mu   sync.Mutex
	sent time.Time
	gone bool // the cluster no longer has it: the next acquisition grants another
}

// confirm records a grant or keepalive of l sent at sent and confirmed.
func (l *sharedLease) confirm(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sent.After(l.sent) {
		l.sent = sent
	}
}

// drop records that the cluster no longer has l.
func (l *sharedLease) drop() {
	l.mu.Lock()
	l.gone = true
	l.mu.Unlock()
}

// lease returns the shared lease of secs to write a key with, and when the
// request that the cluster last confirmed for it was sent (the new lock's
// trust starts there): the one it has, if the cluster has not refused it
// and it is trusted for at least ttl/2 more, or a new one.
func (ls *leases) lease(ctx context.Context, c *clientv3.Client, secs int64, ttl time.Duration) (*sharedLease, time.Time, error) {
	ls.mu.Lock()
	l := ls.byTTL[secs]
	ls.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		sent, gone := l.sent, l.gone
		l.mu.Unlock()
		if !gone && time.Now().Before(sent.Add(ttl/2)) {
			return l, sent, nil
		}
	}
	sent := time.Now()
	g, err := c.Grant(ctx, secs)
	if err != nil {
		return nil, time.Time{}, err
	}
	l = &sharedLease{id: g.ID, sent: sent}
	ls.mu.Lock()
	if ls.byTTL == nil {
		ls.byTTL = make(map[int64]*sharedLease)
	}
	ls.byTTL[secs] = l // a lease granted at once by another acquisition is left to its locks
	ls.mu.Unlock()
	return l, sent, nil
}

// key is the key of an acquisition on l under prefix: unique, since two
// acquisitions of one name by the Locker share the lease.
func (ls *leases) key(prefix string, l *sharedLease) string {
	return fmt.Sprintf("%s%016x-%x", prefix, int64(l.id), ls.seq.Add(1))
}

// deleteKey deletes key, written with a shared lease, if it still has the
// create revision rev (0: whatever it has) — the shared lease's
// counterpart of revoking a lease of the lock's own: the lease goes on
// for the Locker's other locks. Detached from the caller's context, with
// a bound of its own; if it fails the key goes when the lease expires.
func deleteKey(c *clientv3.Client, key string, rev int64) (deleted bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), ttllock.ReleaseTimeout)
	defer cancel()
	txn := c.Txn(ctx)
	if rev != 0 {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev))
	}
	resp, err := txn.Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded && (rev != 0 || resp.Responses[0].GetResponseDeleteRange().Deleted > 0), nil
}

// sharedHeld is a granted lock on a shared lease: a renewal is one
// keepalive of the lease (which the Locker's other locks on it also
// send), a release the owner-checked delete of its key.
type sharedHeld struct {
	c     *clientv3.Client
	key   string
	rev   int64
	lease *sharedLease
}

func (h *sharedHeld) Renew(ctx context.Context) (refused bool, err error) {
	sent := time.Now()
	_, err = h.c.KeepAliveOnce(clientv3.WithRequireLeader(ctx), h.lease.id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		h.lease.drop()
		return true, errors.New("the cluster no longer has the lock's shared lease (it expired or was revoked)")
	case err == nil:
		h.lease.confirm(sent)
	}
	return false, err
}

func (h *sharedHeld) Release(context.Context) (notHeld bool, err error) {
	deleted, err := deleteKey(h.c, h.key, h.rev)
	if err != nil {
		return false, err
	}
	return !deleted, nil
}
