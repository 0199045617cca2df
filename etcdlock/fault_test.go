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
	"github.com/sqlock/sqlock/internal/testing/locktest"
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

// history records a fault test's acquisitions, losses, fenced writes and
// releases for porcupine (locktest.History: the conformance suite's model
// of a lock guarding a register), so that each fault is checked against
// the same specification as the suite's own history, not only by the
// test's assertions.
type history struct {
	*locktest.History
	value atomic.Int64
}

func newHistory() *history { return &history{History: locktest.NewHistory(true)} }

// recorded is a lock in a history: its client, and the watch that records
// its loss.
type recorded struct {
	*etcdlock.Lock
	client int
	stop   chan struct{}
	done   chan struct{}
}

// acquire records client's acquisition, and from its grant the lock's
// loss, if its Lost fires before the holder writes and releases.
func (h *history) acquire(client int, acquire func() (*etcdlock.Lock, error)) (*recorded, error) {
	lk, err := h.Acquire(client, func() (sqlock.Lock, error) {
		l, err := acquire()
		if err != nil {
			return nil, err
		}
		return l, nil
	})
	if err != nil {
		return nil, fmt.Errorf("client %d: Acquire: %w", client, err)
	}
	r := &recorded{Lock: lk.(*etcdlock.Lock), client: client, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		h.Lose(client, func() bool {
			select {
			case <-r.Lost():
				return true
			case <-r.stop:
				return r.Err() != nil
			}
		})
	}()
	return r, nil
}

// mustAcquire is acquire, failing the test on an error.
func (h *history) mustAcquire(t *testing.T, client int, acquire func() (*etcdlock.Lock, error)) *recorded {
	t.Helper()
	r, err := h.acquire(client, acquire)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// mustAcquireEventually is mustAcquire, trying again (up to 5 times) after
// an acquire that failed: the failed tries are recorded in the history as
// acquisitions that did not happen.
func (h *history) mustAcquireEventually(t *testing.T, client int, acquire func() (*etcdlock.Lock, error)) *recorded {
	t.Helper()
	for try := 1; ; try++ {
		r, err := h.acquire(client, acquire)
		if err == nil {
			return r
		}
		if try == 5 {
			t.Fatal(err)
		}
		t.Logf("try %d: %v", try, err)
	}
}

// finish records the holder's read and fenced write of the history's
// register, and its release, whose error it returns; ok says whether the
// write succeeded.
func (h *history) finish(r *recorded) (ok bool, err error) {
	h.Read(r.client)
	ok = h.Write(r.client, r.Token(), int(h.value.Add(1)), nil)
	return ok, h.release(r)
}

// release records the holder's release, and returns its error.
func (h *history) release(r *recorded) error {
	close(r.stop)
	<-r.done // at once: the watch returns on stop
	return h.Release(r.client, r.Token(), func() error { return r.Release(context.Background()) })
}

// childLock is a lock a child process holds, seen by the parent's history:
// its token, which the child reported.
type childLock struct {
	sqlock.Fenced
	token int64
}

func (l childLock) Token() int64 { return l.token }

// released checks a Release: nil, or, for a lock that was lost, an error.
func released(t *testing.T, l *etcdlock.Lock) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil && l.Err() == nil {
		t.Errorf("Release of holder %d, not lost: %v", l.Token(), err)
	}
}

// reachable waits until cl reaches the cluster again (its connection
// re-established after a fault), so that a Release is answered within its
// own bound; the test fails if it never does.
func reachable(t *testing.T, cl *clientv3.Client) {
	t.Helper()
	tctx := testContext(t)
	for {
		ctx, cancel := context.WithTimeout(tctx, time.Second)
		_, err := cl.Get(ctx, "reachable")
		cancel()
		if err == nil {
			return
		}
		if tctx.Err() != nil {
			t.Fatalf("the client never reached the cluster again: %v", err)
		}
	}
}

// TestLeaderKilledWhileHeldAndWaitersQueue: the leader is killed while a
// lock is held and four waiters queue. A new leader is elected; the
// waiters are served in the order they arrived, one at a time, with
// increasing tokens; the history (each holder's read, fenced write and
// release) is linearizable.
func TestLeaderKilledWhileHeldAndWaitersQueue(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	cl := c.Client(t)
	lk := etcdlock.New(cl, etcdlock.WithTimeout(5*time.Minute))
	name := t.Name()
	var h holders
	hist := newHistory()
	acquire := func() (*etcdlock.Lock, error) { return lk.Acquire(ctx, name, 10*time.Second) }
	first := hist.mustAcquire(t, 0, acquire)
	h.enter(t, first.Lock)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	const waiters = 4
	for i := range waiters {
		wg.Go(func() {
			l, err := hist.acquire(i+1, acquire)
			if err != nil {
				t.Error(err)
				return
			}
			h.enter(t, l.Lock)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			h.leave(l.Lock)
			if _, err := hist.finish(l); err != nil && l.Err() == nil {
				t.Errorf("Release of holder %d, not lost: %v", l.Token(), err)
			}
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
	h.leave(first.Lock)
	if _, err := hist.finish(first); err != nil && first.Err() == nil {
		t.Errorf("Release of the first holder across the leader's death, not lost: %v", err)
	}
	awaitGroup(t, &wg, "every waiter served after the leader was killed")
	if len(order) != waiters {
		t.Fatalf("%d of %d waiters served", len(order), waiters)
	}
	for i := range order {
		if order[i] != i {
			t.Fatalf("waiters served in order %v, want their arrival order", order)
		}
	}
	hist.Check(t)
}

// takeover is the end of a fault that took old's lock: next (which got the
// lock once old's Lost fired) writes the register; old, once it reaches
// the cluster again (reach), writes it too, refused by the fence, and its
// Release is not held; next releases. The history of both is
// linearizable.
func takeover(t *testing.T, hist *history, old, next *recorded, reach func()) {
	t.Helper()
	if ok, err := hist.finish(next); !ok || err != nil {
		t.Fatalf("new holder: write %t, Release %v; want both to succeed", ok, err)
	}
	await(t, old.Lost(), "the old holder's Lost firing")
	if !errors.Is(old.Err(), sqlock.ErrLost) {
		t.Fatalf("old holder's Err: %v, want ErrLost", old.Err())
	}
	reach()
	if ok, err := hist.finish(old); ok || !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("old holder: write %t, Release %v; want the write fenced out and ErrNotHeld", ok, err)
	}
	hist.Check(t)
}

// TestHolderMemberKilled: the only member a holder's client knows is
// killed. The holder's Lost fires; another client (of the two members
// left) gets the lock only after it has, with a greater token; the old
// holder's late write is fenced out and its Release, once its member is
// back, is not held; the history is linearizable.
func TestHolderMemberKilled(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	m := c.Members[0]
	var h holders
	hist := newHistory()
	oldClient := c.Client(t, m.ClientURL)
	old := hist.mustAcquire(t, 0, func() (*etcdlock.Lock, error) {
		return etcdlock.New(oldClient).Acquire(ctx, t.Name(), 3*time.Second)
	})
	h.enter(t, old.Lock)
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	others := c.Others(m)
	nextLocker := etcdlock.New(c.Client(t, others[0].ClientURL, others[1].ClientURL), etcdlock.WithTimeout(time.Minute))
	// While the surviving members elect a leader the waiter's own lease may
	// go unconfirmed for its whole TTL on a slow machine; that waiter gives
	// up, typed, and a new one waits. What is asserted is who holds, not how
	// soon.
	next := hist.mustAcquireEventually(t, 1, func() (*etcdlock.Lock, error) { return nextLocker.Acquire(ctx, t.Name(), 3*time.Second) })
	h.enter(t, next.Lock) // fails unless old's Err is set by now
	takeover(t, hist, old, next, func() {
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		reachable(t, oldClient)
	})
}

// TestPartitionedHolderIsLost: a holder's client reaches the cluster
// through a proxy that the test stalls (a partition) past the TTL. Its
// Lost fires; another client gets the lock with a greater token; when the
// partition heals, the old holder's write is fenced out and its Release
// is not held; the history is linearizable.
func TestPartitionedHolderIsLost(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	p := pgtest.StartTCPProxy(t, strings.TrimPrefix(c.Members[0].ClientURL, "http://"))
	var h holders
	hist := newHistory()
	oldClient := c.Client(t, "http://"+p.Addr())
	old := hist.mustAcquire(t, 0, func() (*etcdlock.Lock, error) {
		return etcdlock.New(oldClient).Acquire(ctx, t.Name(), 3*time.Second)
	})
	h.enter(t, old.Lock)
	p.Stall()
	nextLocker := etcdlock.New(c.Client(t), etcdlock.WithTimeout(time.Minute))
	next := hist.mustAcquire(t, 1, func() (*etcdlock.Lock, error) { return nextLocker.Acquire(ctx, t.Name(), 3*time.Second) })
	h.enter(t, next.Lock)
	takeover(t, hist, old, next, func() {
		p.Resume()
		reachable(t, oldClient)
	})
}

// TestRestartOfTheWholeClusterKeepsLocksAndTokens: every member killed
// and started again with its data. A lock held across the restart (a TTL
// longer than the outage) is still held — TryAcquire is refused, its
// Release confirmed — and the next holder's token is greater than every
// token before the restart; each name's history is linearizable.
func TestRestartOfTheWholeClusterKeepsLocksAndTokens(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	lk := etcdlock.New(c.Client(t), etcdlock.WithTimeout(time.Minute))
	histA, histB := newHistory(), newHistory()
	a := func(ttl time.Duration) func() (*etcdlock.Lock, error) {
		return func() (*etcdlock.Lock, error) { return lk.Acquire(ctx, t.Name()+"/a", ttl) }
	}
	before := histA.mustAcquire(t, 0, a(10*time.Second))
	if ok, err := histA.finish(before); !ok || err != nil {
		t.Fatalf("before the restart: write %t, Release %v", ok, err)
	}
	held := histB.mustAcquire(t, 0, func() (*etcdlock.Lock, error) { return lk.Acquire(ctx, t.Name()+"/b", 5*time.Minute) })
	if err := c.KillAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	after := histA.mustAcquire(t, 1, a(10*time.Second))
	if after.Token() <= before.Token() || after.Token() <= held.Token() {
		t.Fatalf("token %d after the restart, not above %d and %d before it", after.Token(), before.Token(), held.Token())
	}
	if ok, err := histA.finish(after); !ok || err != nil {
		t.Fatalf("after the restart: write %t, Release %v", ok, err)
	}
	if _, err := histB.acquire(1, func() (*etcdlock.Lock, error) { return lk.TryAcquire(ctx, t.Name()+"/b", 10*time.Second) }); !errors.Is(err, etcdlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a lock held across the restart: %v, want ErrNotAcquired", err)
	}
	if ok, err := histB.finish(held); !ok || err != nil || held.Err() != nil {
		t.Fatalf("the lock held across the restart: write %t, Release %v (Err %v)", ok, err, held.Err())
	}
	histA.Check(t)
	histB.Check(t)
}

// TestQuorumLostFailsTypedAndGrantsNothing: two of three members killed.
// Acquire fails with ErrTimeout at its bound, TryAcquire with the
// cluster's error, never ErrNotAcquired; a lock held meanwhile is lost
// (Lost fires); once the members are back, the lock's next holder has a
// greater token, the old holder's write is fenced out and its Release is
// not held; the history is linearizable.
func TestQuorumLostFailsTypedAndGrantsNothing(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.New(t, 3)
	lk := etcdlock.New(c.Client(t), etcdlock.WithTimeout(2*time.Second))
	hist := newHistory()
	old := hist.mustAcquire(t, 0, func() (*etcdlock.Lock, error) { return lk.Acquire(ctx, t.Name(), 3*time.Second) })
	for _, m := range c.Members[1:] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	// Acquire waits out the missing leader until its bound.
	_, err := hist.acquire(1, func() (*etcdlock.Lock, error) { return lk.Acquire(ctx, t.Name(), 3*time.Second) })
	if !errors.Is(err, sqlock.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire without a quorum: %v; want ErrTimeout", err)
	}
	// TryAcquire reports the cluster's refusal (no leader) or its silence
	// (ErrTimeout): never ErrNotAcquired, which would claim a holder.
	var e *etcdlock.Error
	_, err = hist.acquire(1, func() (*etcdlock.Lock, error) { return lk.TryAcquire(ctx, t.Name(), 3*time.Second) })
	if !errors.As(err, &e) || errors.Is(err, sqlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire without a quorum: %v; want the cluster's error", err)
	}
	t.Logf("TryAcquire without a quorum: %v", err)
	await(t, old.Lost(), "the holder's Lost firing without a quorum")
	if err := c.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	lk2 := etcdlock.New(c.Client(t), etcdlock.WithTimeout(time.Minute))
	next := hist.mustAcquire(t, 1, func() (*etcdlock.Lock, error) { return lk2.Acquire(ctx, t.Name(), 3*time.Second) })
	if next.Token() <= old.Token() {
		t.Fatalf("token %d after the outage, not above %d", next.Token(), old.Token())
	}
	takeover(t, hist, old, next, func() {})
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
// with versioned.ErrFenced, and its Release is not held. The history of
// both (the child's operations recorded by the parent, from what the
// child reported) is linearizable.
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
	lines := make(chan string)
	go func() {
		defer close(lines)
		for out := bufio.NewScanner(stdout); out.Scan(); {
			lines <- out.Text()
		}
	}()
	// line returns the child's next line that begins with prefix, logging
	// the others, or fails the test if the child never says it.
	line := func(prefix string) string {
		ctx := testContext(t)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the child ended before saying %q", prefix)
				}
				if strings.HasPrefix(l, prefix) {
					return l
				}
				t.Log("child:", l)
			case <-ctx.Done():
				t.Fatalf("the child never said %q", prefix)
			}
		}
	}
	hist := newHistory()
	var oldToken int64
	hist.Acquire(0, func() (sqlock.Lock, error) {
		if _, err := fmt.Sscanf(line("ACQUIRED "), "ACQUIRED %d", &oldToken); err != nil {
			t.Fatalf("the child's ACQUIRED line: %v", err)
		}
		return childLock{token: oldToken}, nil
	})
	// The child's loss, write and release happen between now (the loss)
	// or its SIGCONT (the rest) and its RESULT line.
	var result string
	reported := make(chan struct{})
	var childOps sync.WaitGroup
	childOps.Go(func() {
		hist.Lose(0, func() bool { <-reported; return strings.Contains(result, "lost=true") })
	})
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	nextLocker := etcdlock.New(c.Client(t), etcdlock.WithTimeout(time.Minute))
	next := hist.mustAcquire(t, 1, func() (*etcdlock.Lock, error) { return nextLocker.Acquire(ctx, t.Name(), 10*time.Second) })
	if next.Token() <= oldToken {
		t.Fatalf("new holder's token %d, not above the paused holder's %d", next.Token(), oldToken)
	}
	wctx, cancel := next.Context(ctx)
	hist.Write(1, next.Token(), 1, func() bool {
		if err := fencedWrite(wctx, db.SQL(), "new holder"); err != nil {
			t.Errorf("new holder's fenced write: %v", err)
			return false
		}
		return true
	})
	cancel()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	childOps.Go(func() {
		hist.Write(0, oldToken, 2, func() bool { <-reported; return strings.Contains(result, "write=nil") })
	})
	childOps.Go(func() {
		hist.Release(0, oldToken, func() error {
			<-reported
			if strings.Contains(result, "release=true") {
				return etcdlock.ErrNotHeld
			}
			return nil
		})
	})
	fmt.Fprintln(stdin)
	result = line("RESULT ")
	close(reported)
	awaitGroup(t, &childOps, "the child's operations recorded")
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
	if err := hist.release(next); err != nil {
		t.Fatalf("new holder's Release: %v", err)
	}
	hist.Check(t)
}
