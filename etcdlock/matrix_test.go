package etcdlock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/etcdlock"
	"github.com/sqlock/sqlock/etcdlock/internal/etcdtest"
	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// matrixTTL outlasts any operation of a cell and any fault's holder that
// is not meant to expire; shortTTL is the shortest lease a member grants
// (etcdtest), for a holder whose expiry is the fault.
const (
	matrixTTL = 30 * time.Second
	shortTTL  = 2 * time.Second
)

// TestMatrix is etcdlock's part of make matrix (internal/testing/matrix):
// the lock on the three-member cluster the package's tests share, its
// token (the key's create revision) fencing the workload's write, on the
// grid MATRIX names, and the faults of issue 37 an etcd lock meets: the
// leader killed, the quorum lost, the holder partitioned from the cluster
// by a proxy, and the holder, a real OS process, stopped with SIGSTOP past
// its lease.
func TestMatrix(t *testing.T) {
	if served, err := matrix.ServePausedHolder(openHolder); served {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	shared := strings.Split(os.Getenv("ETCD_ENDPOINTS"), ",")
	// The leader and quorum faults harm their cluster, so they have one of
	// their own, started once: each leaves every member running.
	faulty := sync.OnceValue(func() *etcdtest.Cluster { return etcdtest.New(t, 3) })
	matrix.Run(t,
		matrix.Row{Mechanism: "etcdlock", Group: "lock", Workloads: matrix.Workloads,
			Open: etcdOpen(shared, true),
			Faults: []matrix.Fault{
				{Name: "etcd leader killed", Expect: matrix.Safe, Run: leaderKilled(faulty)},
				{Name: "etcd leader killed under load", Run: leaderKilledUnderLoad(faulty)},
				{Name: "etcd quorum lost", Expect: matrix.Unavailable, Run: quorumLost(faulty)},
				{Name: "partitioned by proxy", Expect: matrix.Safe, Run: partitioned(shared)},
				{Name: "holder paused past TTL (fenced)", Expect: matrix.Safe, Run: pausedFault(shared, true)},
			}},
		matrix.Row{Mechanism: "etcdlock (unfenced)", Group: "lock",
			Open: etcdOpen(shared, false),
			Faults: []matrix.Fault{
				{Name: "holder paused past TTL (unfenced)", Expect: matrix.Unsafe, Run: pausedFault(shared, false)},
			}},
	)
}

// countedOn is a client of endpoints whose every request is counted on rt:
// each unary call, and each message sent on a stream (keepalives, watches).
func countedOn(t testing.TB, rt *matrix.RoundTrips, endpoints ...string) *clientv3.Client {
	cfg := etcdtest.Config(endpoints...)
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			rt.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return matrixStream{s, rt}, nil
		}))
	cl, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

type matrixStream struct {
	grpc.ClientStream
	rt *matrix.RoundTrips
}

func (s matrixStream) SendMsg(m any) error {
	s.rt.Add(1)
	return s.ClientStream.SendMsg(m)
}

// locker is etcdlock's Acquirer on a counted client of endpoints, waiting
// as long as a fault may need.
func locker(t testing.TB, rt *matrix.RoundTrips, ttl time.Duration, endpoints ...string) sqlock.Acquirer {
	return etcdlock.New(countedOn(t, rt, endpoints...), etcdlock.WithTimeout(time.Minute)).Acquirer(ttl)
}

// etcdOpen is a row's Open: every contender's operation is guarded by a
// lock on the cluster of endpoints, fenced with its token or not.
func etcdOpen(endpoints []string, fenced bool) func(context.Context, *matrix.Cell) ([]matrix.Actor, func(), error) {
	return func(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
		locks := locker(c.T, c.RoundTrips, matrixTTL, endpoints...)
		actors := make([]matrix.Actor, c.Contenders)
		for i := range actors {
			actors[i] = matrix.Guarded(c, c.DB, locks, fenced)
		}
		return actors, nil, nil
	}
}

// leaderKilled: A holds an order's lock and has read it, two waiters
// queue behind it; the leader is killed. Once the two members left agree
// on a new leader, A writes and releases, and the waiters are served in
// turn, each finding the order charged. No operation fails: the cluster
// is unavailable while it elects (measured, in the note), and the locks
// wait it out.
func leaderKilled(cluster func() *etcdtest.Cluster) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		return killLeader(ctx, f, cluster())
	}
}

func killLeader(ctx context.Context, f *matrix.FaultRun, cluster *etcdtest.Cluster) error {
	c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 3, matrix.HotKey, 1)
	if err != nil {
		return err
	}
	key := c.State.Key(0)
	actor := func(q matrix.Querier) matrix.Actor {
		return matrix.Guarded(c, q, locker(f.T, c.RoundTrips, matrixTTL, cluster.Endpoints()...), true)
	}
	h, err := f.Hold(ctx, c, key, actor)
	if err != nil {
		return fmt.Errorf("holder A: %w", err)
	}
	watcher := cluster.Client(f.T)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { f.Do(ctx, actor(c.DB), key) })
		waitKeys(f.T.(*testing.T), watcher, matrix.LockName(c, key), int64(i+2))
	}
	old, err := cluster.Leader(ctx)
	if err == nil {
		err = old.Kill()
	}
	killed := time.Now()
	var leader *etcdtest.Member
	if err == nil {
		leader, err = cluster.Leader(ctx)
	}
	elected := time.Since(killed)
	h.Wait(ctx)
	wg.Wait()
	if err != nil {
		return err
	}
	f.Note("the leader (%s) killed while A held the order's lock and 2 waiters queued; %s elected after %v; A wrote, then the waiters were served",
		old.Name, leader.Name, elected.Round(time.Millisecond))
	return old.Start(ctx)
}

// leaderKilledUnderLoad: four contenders run operations on orders of
// their own (4 each in quick, 200 in full) and the leader
// is killed once each has done one. No verdict is promised: whether an
// operation in flight waits the election out or fails (a grant or a
// keepalive the dying leader never answered) depends on timing; the run
// records which, and for how long operations failed.
func leaderKilledUnderLoad(cluster func() *etcdtest.Cluster) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		cl := cluster()
		const contenders = 4
		ops := map[matrix.Mode]int{matrix.Quick: 4, matrix.Full: 200}[f.Mode]
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, contenders, matrix.ManyKeys, contenders*ops)
		if err != nil {
			return err
		}
		locks := locker(f.T, c.RoundTrips, matrixTTL, cl.Endpoints()...)
		started := make(chan struct{}, contenders)
		actors := make([]matrix.Actor, contenders)
		for i := range actors {
			op := matrix.Guarded(c, c.DB, locks, true)
			var once sync.Once
			actors[i] = matrix.ActorFunc(func(ctx context.Context, key string) (matrix.Result, error) {
				r, err := op(ctx, key)
				once.Do(func() { started <- struct{}{} })
				return r, err
			})
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.Load(ctx, c, actors, ops)
		}()
		for range contenders {
			select {
			case <-started:
			case <-done:
			}
		}
		old, err := cl.Leader(ctx)
		if err == nil {
			err = old.Kill()
		}
		killed := time.Now()
		var leader *etcdtest.Member
		if err == nil {
			leader, err = cl.Leader(ctx)
		}
		elected := time.Since(killed)
		<-done
		if err != nil {
			return err
		}
		f.Note("%d contenders × %d operations; the leader (%s) killed once each had done one, %s elected after %v; not asserted: whether an operation in flight fails depends on timing",
			contenders, ops, old.Name, leader.Name, elected.Round(time.Millisecond))
		return old.Start(ctx)
	}
}

// quorumLost: A holds an order's lock and has read it; two of three
// members are killed. B's Acquire of the same order fails typed
// (ErrTimeout at its bound): nothing can be granted. A writes (no one
// else can hold the lock; no lease expires without a leader). The members
// come back; B waits out A's lease and finds the order charged.
func quorumLost(cluster func() *etcdtest.Cluster) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		return loseQuorum(ctx, f, cluster())
	}
}

func loseQuorum(ctx context.Context, f *matrix.FaultRun, cluster *etcdtest.Cluster) error {
	c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 2, matrix.HotKey, 1)
	if err != nil {
		return err
	}
	key := c.State.Key(0)
	a := func(q matrix.Querier) matrix.Actor {
		return matrix.Guarded(c, q, locker(f.T, c.RoundTrips, shortTTL, cluster.Endpoints()...), true)
	}
	h, err := f.Hold(ctx, c, key, a)
	if err != nil {
		return fmt.Errorf("holder A: %w", err)
	}
	for _, m := range cluster.Members[1:] {
		if err = m.Kill(); err != nil {
			break
		}
	}
	if err == nil {
		waiter := etcdlock.New(countedOn(f.T, c.RoundTrips, cluster.Endpoints()...), etcdlock.WithTimeout(time.Second)).Acquirer(shortTTL)
		_, berr := f.Do(ctx, matrix.Guarded(c, c.DB, waiter, true), key)
		f.Note("2 of 3 members killed while A held the order's lock; B's Acquire: %v", berr)
	}
	h.Resume() // its Release waits for the members, which come back now
	if serr := cluster.StartAll(ctx); err == nil {
		err = serr
	}
	h.Wait(ctx)
	if err != nil {
		return err
	}
	_, err = f.Do(ctx, a(c.DB), key)
	return err
}

// partitioned: A's client reaches the cluster of endpoints (the shared
// one: the fault harms no member) through a proxy to one member. A holds
// an order's lock (a 2 s lease) and has read it; the proxy stalls. The
// cluster expires A's lease; B, a client of every member, gets the lock
// with a greater token and charges the order. The partition heals; A's
// write, fenced, is refused by PostgreSQL. A is the fault, not one of its
// operations: what it did is in the note.
func partitioned(endpoints []string) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 2, matrix.HotKey, 1)
		if err != nil {
			return err
		}
		p := pgtest.StartTCPProxy(f.T, strings.TrimPrefix(endpoints[0], "http://"))
		a := func(q matrix.Querier) matrix.Actor {
			return matrix.Guarded(c, q, locker(f.T, c.RoundTrips, shortTTL, "http://"+p.Addr()), true)
		}
		b := matrix.Guarded(c, c.DB, locker(f.T, c.RoundTrips, matrixTTL, endpoints...), true)
		return f.Partitioned(ctx, c, p, a, b,
			fmt.Sprintf("A's client through a proxy to one member, stalled while A held the order's lock (lease %v) and had read it", shortTTL),
			"B, once the lease expired")
	}
}

// pausedFault: matrix.PausedHolder with the shortest lease a member
// grants, on the cluster of endpoints.
func pausedFault(endpoints []string, fenced bool) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 1, matrix.HotKey, 1)
		if err != nil {
			return err
		}
		backend, err := json.Marshal(endpoints)
		if err != nil {
			return err
		}
		b := matrix.Guarded(c, c.DB, locker(f.T, c.RoundTrips, matrixTTL, endpoints...), fenced)
		return f.PausedHolder(ctx, c, matrix.HolderSpec{TTL: shortTTL, Fenced: fenced, Backend: backend}, b)
	}
}

// openHolder is the paused holder's lock, on the cluster spec.Backend
// lists.
func openHolder(_ context.Context, spec matrix.HolderSpec) (sqlock.Acquirer, func(), error) {
	var endpoints []string
	if err := json.Unmarshal(spec.Backend, &endpoints); err != nil {
		return nil, nil, err
	}
	cl, err := clientv3.New(etcdtest.Config(endpoints...))
	if err != nil {
		return nil, nil, err
	}
	return etcdlock.New(cl).Acquirer(spec.TTL), func() { cl.Close() }, nil
}
