package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock/etcdlock"
)

// leaseOf is the lease the cluster has l's key attached to.
func leaseOf(t *testing.T, cl *clientv3.Client, l *etcdlock.Lock) clientv3.LeaseID {
	t.Helper()
	resp, err := cl.Get(testContext(t), l.Key())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the key of lock %d: %v, %v", l.Token(), resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestSharedLeaseLosesEveryLockOnIt: WithSharedLease puts a Locker's
// locks of one TTL on one lease (another TTL gets its own), yet two
// acquisitions of one name by that Locker still exclude each other. When
// the cluster no longer has the shared lease, every lock on it is lost
// and its Release is ErrNotHeld, the lock of the other TTL is not, and
// the next acquisition is granted on a new lease with a greater token.
func TestSharedLeaseLosesEveryLockOnIt(t *testing.T) {
	cl := sharedClient(t)
	ctx := testContext(t)
	lk := etcdlock.New(cl, etcdlock.WithSharedLease())
	name := t.Name()
	a := mustAcquire(t, lk, name+"/a", 3*time.Second)
	b := mustAcquire(t, lk, name+"/b", 3*time.Second)
	c := mustAcquire(t, lk, name+"/c", 6*time.Second)
	shared := leaseOf(t, cl, a)
	if leaseOf(t, cl, b) != shared || leaseOf(t, cl, c) == shared {
		t.Fatalf("leases %x, %x, %x: want the first two shared and the third (another TTL) its own", shared, leaseOf(t, cl, b), leaseOf(t, cl, c))
	}
	if _, err := lk.TryAcquire(ctx, name+"/a", 3*time.Second); !errors.Is(err, etcdlock.ErrNotAcquired) {
		t.Fatalf("the Locker's own TryAcquire of a name it holds on the shared lease: %v, want ErrNotAcquired", err)
	}
	if _, err := cl.Revoke(ctx, shared); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*etcdlock.Lock{a, b} {
		await(t, l.Lost(), "Lost firing for a lock on the revoked shared lease")
		if err := l.Release(context.Background()); !errors.Is(err, etcdlock.ErrNotHeld) {
			t.Fatalf("Release of a lock on the revoked lease: %v, want ErrNotHeld", err)
		}
	}
	if c.Err() != nil {
		t.Fatalf("the lock of the other TTL: %v, want it still trusted", c.Err())
	}
	next := mustAcquire(t, lk, name+"/a", 3*time.Second)
	if leaseOf(t, cl, next) == shared || next.Token() <= a.Token() {
		t.Fatalf("next lock on lease %x with token %d; want a new lease and a token above %d", leaseOf(t, cl, next), next.Token(), a.Token())
	}
	released(t, next)
	released(t, c)
}
