package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/etcdlock"
)

// electionTestTTL is long enough for a busy machine to renew, short
// enough that a revoked lease is found out at the next keepalive, a
// third of it later.
const electionTestTTL = 3 * time.Second

// TestElectionLeaderNeverNamesADeposedLeader: once the leader's lease is
// revoked behind its back (as its expiry would), Leader reports nobody
// and the leader's Lost fires; the next winner is read with a greater
// term. A holder that took the name by Acquire, which announces no
// identity, is nobody too.
func TestElectionLeaderNeverNamesADeposedLeader(t *testing.T) {
	ctx := t.Context()
	cl := sharedClient(t)
	lk := etcdlock.New(cl)
	a := lk.Candidate(t.Name(), "host-a", electionTestTTL)
	la, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Get(ctx, la.Key())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "host-a" {
		t.Fatalf("the leader's key: %v, %v; want its identity as the value", resp, err)
	}
	if _, err := cl.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if id, term, err := a.Leader(ctx); !errors.Is(err, etcdlock.ErrNoLeader) || !errors.Is(err, sqlock.ErrNoLeader) {
		t.Fatalf("Leader after the leader's lease was revoked: %q, %d, %v; want ErrNoLeader", id, term, err)
	}
	select {
	case <-la.Lost():
	case <-ctx.Done():
		t.Fatal("the deposed leader's Lost never fired")
	}
	lb, err := lk.Candidate(t.Name(), "host-b", electionTestTTL).Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id, term, err := a.Leader(ctx); err != nil || id != "host-b" || term != lb.Token() || term <= la.Token() {
		t.Fatalf("Leader: %q, %d, %v; want host-b at %d, above %d", id, term, err, lb.Token(), la.Token())
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	plain := mustAcquire(t, lk, t.Name(), electionTestTTL)
	if _, _, err := a.Leader(ctx); !errors.Is(err, etcdlock.ErrNoLeader) {
		t.Fatalf("Leader while a plain lock holds the name: %v; want ErrNoLeader", err)
	}
	released(t, plain)
}

// TestElectionNilLocker: a candidate of a nil Locker is refused with
// ErrNilHandle by every method.
func TestElectionNilLocker(t *testing.T) {
	c := (*etcdlock.Locker)(nil).Candidate("x", "host-a", electionTestTTL)
	if _, err := c.Campaign(t.Context()); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Campaign: %v; want ErrNilHandle", err)
	}
	if _, _, err := c.Leader(t.Context()); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Leader: %v; want ErrNilHandle", err)
	}
	if _, err := c.Observe(t.Context()); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Observe: %v; want ErrNilHandle", err)
	}
	var l *etcdlock.Leadership
	if err := l.Resign(t.Context()); !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("Resign of a nil Leadership: %v; want ErrNotHeld", err)
	}
}
