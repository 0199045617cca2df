package etcdlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/etcdlock"
	"github.com/sqlock/sqlock/etcdlock/internal/etcdtest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// Every test here inflicts a fault on a cluster of its own. None asserts
// a duration: each checks order, exclusion, tokens and typed errors.

// holders checks that no two trusted holders of a name overlap: a holder
// entering finds the one before it gone, or lost (its Err set: its local
// deadline, which comes before the cluster can expire its lease, has
// passed).
type holders struct {
	cur     atomic.Pointer[etcdlock.Lock]
	last    atomic.Int64 // the last holder's token
	entered atomic.Int64
}

func (h *holders) enter(t *testing.T, l *etcdlock.Lock) {
	if prev := h.cur.Swap(l); prev != nil && prev.Err() == nil {
		t.Errorf("holder %d entered while holder %d still trusted its lock", l.Token(), prev.Token())
	}
	if prev := h.last.Swap(l.Token()); prev >= l.Token() {
		t.Errorf("token %d after %d: not increasing", l.Token(), prev)
	}
	h.entered.Add(1)
}

func (h *holders) leave(l *etcdlock.Lock) { h.cur.CompareAndSwap(l, nil) }

// released checks a Release: nil, or, for a lock that was lost, an error.
func released(t *testing.T, l *etcdlock.Lock) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil && l.Err() == nil {
		t.Errorf("Release of holder %d, not lost: %v", l.Token(), err)
	}
}

// reachable waits until cl reaches the cluster again (its connection
// re-established after a fault), so that a Release is answered within its
// own bound.
func reachable(cl *clientv3.Client) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cl.Get(ctx, "reachable")
		cancel()
		if err == nil {
			return
		}
	}
}

// TestLeaderKilledWhileHeldAndWaitersQueue: the leader is killed while a
// lock is held and four waiters queue. A new leader is elected; the
// waiters are served in the order they arrived, one at a time, with
// increasing tokens.
func TestLeaderKilledWhileHeldAndWaitersQueue(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	cl := c.Client(t)
	lk := etcdlock.New(cl, etcdlock.WithTimeout(5*time.Minute))
	name := t.Name()
	var h holders
	first := mustAcquire(t, lk, name, 10*time.Second)
	h.enter(t, first)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	const waiters = 4
	for i := range waiters {
		wg.Go(func() {
			l, err := lk.Acquire(ctx, name, 10*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			h.enter(t, l)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			h.leave(l)
			released(t, l)
		})
		waitKeys(t, cl, name, int64(i+2))
	}
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader == old {
		t.Fatal("the killed member is still the leader")
	}
	h.leave(first)
	released(t, first)
	wg.Wait()
	if len(order) != waiters {
		t.Fatalf("%d of %d waiters served", len(order), waiters)
	}
	for i := range order {
		if order[i] != i {
			t.Fatalf("waiters served in order %v, want their arrival order", order)
		}
	}
}

// TestHolderMemberKilled: the only member a holder's client knows is
// killed. The holder's Lost fires; another client (of the two members
// left) gets the lock only after it has, with a greater token; the old
// holder's Release, once its member is back, is not held.
func TestHolderMemberKilled(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	m := c.Members[0]
	var h holders
	oldClient := c.Client(t, m.ClientURL)
	old := mustAcquire(t, etcdlock.New(oldClient), t.Name(), 3*time.Second)
	h.enter(t, old)
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	others := c.Others(m)
	next := mustAcquire(t, etcdlock.New(c.Client(t, others[0].ClientURL, others[1].ClientURL), etcdlock.WithTimeout(time.Minute)), t.Name(), 3*time.Second)
	h.enter(t, next) // fails unless old's Err is set by now
	<-old.Lost()
	if !errors.Is(old.Err(), sqlock.ErrLost) {
		t.Fatalf("old holder's Err: %v, want ErrLost", old.Err())
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	reachable(oldClient)
	if err := old.Release(ctx); !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("old holder's Release: %v, want ErrNotHeld", err)
	}
	released(t, next)
}

// TestPartitionedHolderIsLost: a holder's client reaches the cluster
// through a proxy that the test stalls (a partition) past the TTL. Its
// Lost fires; another client gets the lock with a greater token; when the
// partition heals, the old holder's Release is not held.
func TestPartitionedHolderIsLost(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	p := pgtest.StartTCPProxy(t, strings.TrimPrefix(c.Members[0].ClientURL, "http://"))
	var h holders
	oldClient := c.Client(t, "http://"+p.Addr())
	old := mustAcquire(t, etcdlock.New(oldClient), t.Name(), 3*time.Second)
	h.enter(t, old)
	p.Stall()
	next := mustAcquire(t, etcdlock.New(c.Client(t), etcdlock.WithTimeout(time.Minute)), t.Name(), 3*time.Second)
	h.enter(t, next)
	<-old.Lost()
	p.Resume()
	reachable(oldClient)
	if err := old.Release(ctx); !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("old holder's Release after the partition: %v, want ErrNotHeld", err)
	}
	released(t, next)
}

// TestRestartOfTheWholeClusterKeepsLocksAndTokens: every member killed
// and started again with its data. A lock held across the restart (a TTL
// longer than the outage) is still held — TryAcquire is refused, its
// Release confirmed — and the next holder's token is greater than every
// token before the restart.
func TestRestartOfTheWholeClusterKeepsLocksAndTokens(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	lk := etcdlock.New(c.Client(t), etcdlock.WithTimeout(time.Minute))
	before := mustAcquire(t, lk, t.Name()+"/a", 10*time.Second)
	released(t, before)
	held := mustAcquire(t, lk, t.Name()+"/b", 5*time.Minute)
	if err := c.KillAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	after := mustAcquire(t, lk, t.Name()+"/a", 10*time.Second)
	if after.Token() <= before.Token() || after.Token() <= held.Token() {
		t.Fatalf("token %d after the restart, not above %d and %d before it", after.Token(), before.Token(), held.Token())
	}
	released(t, after)
	if _, err := lk.TryAcquire(ctx, t.Name()+"/b", 10*time.Second); !errors.Is(err, etcdlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a lock held across the restart: %v, want ErrNotAcquired", err)
	}
	if err := held.Release(ctx); err != nil || held.Err() != nil {
		t.Fatalf("Release of the lock held across the restart: %v (Err %v)", err, held.Err())
	}
}

// TestQuorumLostFailsTypedAndGrantsNothing: two of three members killed.
// Acquire fails with ErrTimeout at its bound, TryAcquire with the
// cluster's error, never ErrNotAcquired; a lock
// held meanwhile is lost (Lost fires); once the members are back, the
// lock's next holder has a greater token, and the old holder's Release is
// not held.
func TestQuorumLostFailsTypedAndGrantsNothing(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	lk := etcdlock.New(c.Client(t), etcdlock.WithTimeout(2*time.Second))
	old := mustAcquire(t, lk, t.Name(), 3*time.Second)
	for _, m := range c.Members[1:] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	// Acquire waits out the missing leader until its bound.
	l, err := lk.Acquire(ctx, t.Name()+"/other", 3*time.Second)
	if l != nil || !errors.Is(err, sqlock.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire without a quorum: %v, %v; want ErrTimeout", l, err)
	}
	// TryAcquire reports the cluster's refusal (no leader) or its silence
	// (ErrTimeout): never ErrNotAcquired, which would claim a holder.
	var e *etcdlock.Error
	l, err = lk.TryAcquire(ctx, t.Name()+"/other", 3*time.Second)
	if l != nil || !errors.As(err, &e) || errors.Is(err, sqlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire without a quorum: %v, %v; want the cluster's error", l, err)
	}
	t.Logf("TryAcquire without a quorum: %v", err)
	<-old.Lost()
	if err := c.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	lk2 := etcdlock.New(c.Client(t), etcdlock.WithTimeout(time.Minute))
	next := mustAcquire(t, lk2, t.Name(), 3*time.Second)
	if next.Token() <= old.Token() {
		t.Fatalf("token %d after the outage, not above %d", next.Token(), old.Token())
	}
	if err := old.Release(ctx); !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("old holder's Release: %v, want ErrNotHeld", err)
	}
	released(t, next)
}

// child starts the test binary as a worker with the given role, on c.
func child(c *etcdtest.Cluster, role string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role,
		"ETCD_CHILD_ENDPOINTS=" + strings.Join(c.Endpoints(), ",")}, env...)...)
	return cmd
}

// TestPausedHolderIsFencedOut: a child process holding a lock is stopped
// with SIGSTOP. Another holder gets the lock — once the cluster has
// expired the paused holder's lease — with a greater token, and writes
// the register fenced. After SIGCONT the child's Lost has fired before it
// tries to write, its fenced write (with its lock's Context) is refused
// with versioned.ErrFenced, and its Release is not held.
func TestPausedHolderIsFencedOut(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	db := pgtest.New(t)
	db.Exec(registerDDL)
	cmd := child(c, "paused", "ETCD_CHILD_DSN="+db.DSN, "ETCD_CHILD_TTL=2s", "ETCD_CHILD_NAME="+t.Name())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	}()
	out := bufio.NewScanner(stdout)
	var oldToken int64
	for out.Scan() {
		if _, err := fmt.Sscanf(out.Text(), "ACQUIRED %d", &oldToken); err == nil {
			break
		}
		t.Log("child:", out.Text())
	}
	if oldToken == 0 {
		t.Fatal("the child did not acquire")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next := mustAcquire(t, etcdlock.New(c.Client(t), etcdlock.WithTimeout(time.Minute)), t.Name(), 10*time.Second)
	if next.Token() <= oldToken {
		t.Fatalf("new holder's token %d, not above the paused holder's %d", next.Token(), oldToken)
	}
	wctx, cancel := next.Context(ctx)
	if err := fencedWrite(wctx, db.SQL(), "new holder"); err != nil {
		t.Fatalf("new holder's fenced write: %v", err)
	}
	cancel()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin)
	var result string
	for out.Scan() {
		if strings.HasPrefix(out.Text(), "RESULT ") {
			result = out.Text()
			break
		}
		t.Log("child:", out.Text())
	}
	if want := "RESULT lost=true write=ErrFenced release=true"; result != want {
		t.Fatalf("paused holder: %q, want %q", result, want)
	}
	var value string
	var fence int64
	if err := db.SQL().QueryRow(`SELECT value, fence FROM register WHERE id = 1`).Scan(&value, &fence); err != nil {
		t.Fatal(err)
	}
	if value != "new holder" || fence != next.Token() {
		t.Fatalf("register = %q fenced at %d, want the new holder's write at %d", value, fence, next.Token())
	}
	released(t, next)
}
