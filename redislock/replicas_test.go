package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// replicated is a primary with one replica, synchronised, and a client of
// each that gives up at once on a dead server.
type replicated struct {
	primary, replica *redistest.Server
	pc, rc           *redis.Client
}

func newReplicated(t *testing.T) *replicated {
	t.Helper()
	p := redistest.New(t, redistest.Options{})
	r := redistest.New(t, redistest.Options{ReplicaOf: p.Addr})
	if err := p.WaitReplicas(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cs := clients(t, []*redistest.Server{p, r})
	return &replicated{primary: p, replica: r, pc: cs[0].(*redis.Client), rc: cs[1].(*redis.Client)}
}

// cutOff makes the replica miss every write the primary takes from now on:
// it is paused (SIGSTOP), so it cannot reconnect once the primary drops its
// connection.
func (rs *replicated) cutOff(t *testing.T) {
	t.Helper()
	if err := rs.replica.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := rs.primary.DropReplicas(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// failOver kills the primary and promotes the replica, as Sentinel would:
// the replica keeps what it had replicated.
func (rs *replicated) failOver(t *testing.T) {
	t.Helper()
	if err := rs.primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := rs.replica.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := rs.replica.Promote(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestWithoutReplicasAFailoverGrantsALockTwice is the article's warning, on
// a real primary and replica: a lock granted by the primary and not yet
// replicated is gone after the replica is promoted, and a second holder
// gets it — with the same fencing token — while the first still trusts
// its lock.
func TestWithoutReplicasAFailoverGrantsALockTwice(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	rs := newReplicated(t)
	rs.cutOff(t)
	a, err := redislock.New(rs.pc).TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	rs.failOver(t)

	b, err := redislock.New(rs.rc).TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("the promoted replica refused the lock it never received: %v", err)
	}
	defer b.Release(ctx)
	if err := a.Err(); err != nil {
		t.Fatalf("the first holder stopped trusting its lock: %v", err)
	}
	if a.Token() != b.Token() {
		t.Fatalf("tokens %d and %d: want the same token minted twice (the INCR was lost too)", a.Token(), b.Token())
	}
}

// TestWithReplicasAFailoverNeverGrantsALockTwice: with WithReplicas(1, …)
// a grant the replica did not acknowledge is refused (ErrNotReplicated,
// which is ErrNotAcquired) and its key released; a grant it acknowledged
// survives the failover, and the promoted replica refuses every such lock
// to a second holder, with the counter at the holders' tokens.
func TestWithReplicasAFailoverNeverGrantsALockTwice(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	rs := newReplicated(t)
	locks := redislock.New(rs.pc, redislock.WithReplicas(1, 50*time.Millisecond), redislock.WithTimeout(30*time.Second))

	// The replica paused: every grant is refused, and nothing is left.
	if err := rs.replica.Pause(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		key := fmt.Sprintf("refused-%d", i)
		_, err := locks.TryAcquire(ctx, key, time.Minute)
		if !errors.Is(err, redislock.ErrNotReplicated) || !errors.Is(err, sqlock.ErrNotAcquired) {
			t.Fatalf("grant with the replica paused: %v, want ErrNotReplicated (and sqlock.ErrNotAcquired)", err)
		}
		if n := rs.pc.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("a refused grant left %q on the primary", key)
		}
	}
	waiting := redislock.New(rs.pc, redislock.WithReplicas(1, 50*time.Millisecond), redislock.WithTimeout(300*time.Millisecond))
	_, err := waiting.AcquireAll(ctx, []string{"refused-a", "refused-b"}, time.Minute)
	if !errors.Is(err, redislock.ErrTimeout) {
		t.Fatalf("AcquireAll with the replica paused: %v, want ErrTimeout", err)
	}
	if _, err := locks.TryAcquireAll(ctx, []string{"refused-a", "refused-b"}, time.Minute); !errors.Is(err, redislock.ErrNotReplicated) {
		t.Fatalf("TryAcquireAll with the replica paused: %v, want ErrNotReplicated", err)
	}
	if n := rs.pc.Exists(ctx, "refused-a", "refused-b").Val(); n != 0 {
		t.Fatalf("refused grants left %d keys on the primary", n)
	}
	if err := rs.replica.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := rs.primary.WaitReplicas(ctx, 1); err != nil {
		t.Fatal(err)
	}

	// The replica back: grants are acknowledged, then the primary fails.
	held := map[string]int64{}
	for i := range 10 {
		key := fmt.Sprintf("job-%d", i)
		l, err := locks.Acquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		held[key] = l.Token()
	}
	all, err := locks.AcquireAll(ctx, []string{"all-b", "all-a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer all.Release(ctx)
	for _, k := range all.Keys() {
		held[k], _ = all.Token(k)
	}
	rs.cutOff(t)
	rs.failOver(t)

	other := redislock.New(rs.rc)
	for key, token := range held {
		if l, err := other.TryAcquire(ctx, key, time.Minute); !errors.Is(err, redislock.ErrNotAcquired) {
			if l != nil {
				l.Release(ctx)
			}
			t.Fatalf("after the failover %q was granted again: %v", key, err)
		}
		h, ok, err := other.Holder(ctx, key)
		if err != nil || !ok || h.Token != token {
			t.Fatalf("the promoted replica's holder of %q: %+v %v %v, want token %d", key, h, ok, err, token)
		}
	}
}

// TestRenewalsTheReplicaMissedDoNotCount: with WithReplicas, a renewal the
// replica does not acknowledge does not move the trust window (a promoted
// replica would expire the key at its older deadline): a lock whose
// replica stays paused is lost, while the primary still has it as the
// holder's, its renewals retried with ErrNotReplicated.
func TestRenewalsTheReplicaMissedDoNotCount(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	rs := newReplicated(t)
	retries := &renewErrors{}
	// Acquire tries again should a loaded machine keep the replica's
	// acknowledgement from arriving within the bound.
	locks := redislock.New(rs.pc, redislock.WithReplicas(1, 100*time.Millisecond),
		redislock.WithObserver(retries), redislock.WithTimeout(30*time.Second))
	l, err := locks.Acquire(ctx, "job", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := rs.replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer rs.replica.Resume()
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("a lock whose renewals the replica never acknowledged was never lost")
	}
	if err := l.Err(); !errors.Is(err, redislock.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", err)
	}
	if h, held, err := redislock.New(rs.pc).Holder(ctx, "job"); err != nil || !held || h.Token != l.Token() {
		t.Fatalf("the primary's holder: %+v %v %v, want the lost lock's (it was not refused, only unreplicated)", h, held, err)
	}
	if !retries.saw(redislock.ErrNotReplicated) {
		t.Fatal("no renewal was retried with ErrNotReplicated")
	}
}

// renewErrors records the errors of retried renewals.
type renewErrors struct {
	mu   sync.Mutex
	errs []error
}

func (r *renewErrors) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.Retry {
		r.mu.Lock()
		r.errs = append(r.errs, e.Err)
		r.mu.Unlock()
	}
}

func (r *renewErrors) saw(target error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.errs, func(err error) bool { return errors.Is(err, target) })
}

// roundTrips counts what a client sends, a pipeline as one round trip,
// and a new connection's set-up (HELLO, CLIENT SETINFO) not at all.
type roundTrips struct{ counter }

func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setUp(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !setUp(cmds[0]) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func setUp(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

// TestReplicaWaitCostsNoRoundTrip: with WithReplicas, WAIT travels in the
// grant's pipeline, so TryAcquire + Release are 2 round trips, as without;
// a grant the replica did not acknowledge costs one more, its release.
func TestReplicaWaitCostsNoRoundTrip(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	rs := newReplicated(t)
	if err := redislock.LoadScripts(ctx, rs.pc); err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	rs.pc.AddHook(rt)
	// A bound long enough for the replica to answer on a loaded machine:
	// a grant it did not acknowledge would cost a round trip more.
	locks := redislock.New(rs.pc, redislock.WithReplicas(1, time.Second))
	l, err := locks.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load(); n != 2 {
		t.Fatalf("TryAcquire + Release: %d round trips, want 2", n)
	}
	if err := rs.replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer rs.replica.Resume()
	rt.n.Store(0)
	if _, err := locks.TryAcquire(ctx, "job", time.Minute); !errors.Is(err, redislock.ErrNotReplicated) {
		t.Fatalf("TryAcquire with the replica paused: %v, want ErrNotReplicated", err)
	}
	if n := rt.n.Load(); n != 2 {
		t.Fatalf("a refused grant: %d round trips, want 2 (the pipeline and the release)", n)
	}
}

// TestWithReplicasRefusesWhatItCannotKeep: a bad count or bound, a bound
// the client's read timeout would cut short, a cluster client and a
// Redlock are refused, typed, by every method, with nothing sent.
func TestWithReplicasRefusesWhatItCannotKeep(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	s := redistest.New(t, redistest.Options{})
	c := s.Client(t, func(o *redis.Options) { o.ReadTimeout = time.Second })
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.Addr}})
	defer cluster.Close()
	for _, tc := range []struct {
		name string
		lk   *redislock.Locker
		want error
	}{
		{"no replicas", redislock.New(c, redislock.WithReplicas(0, time.Millisecond)), sqlock.ErrInvalidOption},
		{"no bound", redislock.New(c, redislock.WithReplicas(1, 0)), sqlock.ErrInvalidOption},
		{"bound over the read timeout", redislock.New(c, redislock.WithReplicas(1, time.Second)), sqlock.ErrInvalidOption},
		{"cluster client", redislock.New(cluster, redislock.WithReplicas(1, time.Millisecond)), sqlock.ErrUnsupported},
	} {
		if _, err := tc.lk.TryAcquire(ctx, "job", time.Second); !errors.Is(err, tc.want) {
			t.Errorf("%s: TryAcquire: %v, want %v", tc.name, err, tc.want)
		}
		if _, err := tc.lk.AcquireAll(ctx, []string{"job"}, time.Second); !errors.Is(err, tc.want) {
			t.Errorf("%s: AcquireAll: %v, want %v", tc.name, err, tc.want)
		}
	}
	r := redislock.NewRedlock(clients(t, redistest.NewN(t, 3, redistest.Options{})), redislock.WithReplicas(1, time.Millisecond))
	if _, err := r.TryAcquire(ctx, "job", time.Second); !errors.Is(err, sqlock.ErrUnsupported) {
		t.Errorf("Redlock with WithReplicas: %v, want ErrUnsupported", err)
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("refused options wrote %d keys", n)
	}
}
