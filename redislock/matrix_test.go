package redislock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// matrixTTL outlasts any operation of a cell and any fault's holder that
// is not meant to expire: the load measures the lock, the faults their
// own expiry.
const matrixTTL = 30 * time.Second

// TestMatrix is redislock's part of make matrix (internal/testing/matrix):
// the lock on one server, its token fencing the workload's write, and
// Redlock over five, on the grid MATRIX names, and the faults of issue 37
// that a Redis lock meets: a restart without persistence, a primary
// failover with and without WithReplicas, and the holder, a real OS
// process, stopped with SIGSTOP past its TTL.
func TestMatrix(t *testing.T) {
	if served, err := matrix.ServePausedHolder(openHolder); served {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	one := redistest.New(t, redistest.Options{})
	five := redistest.NewN(t, 5, redistest.Options{})
	on := func(servers []*redistest.Server) func() []*redistest.Server {
		return func() []*redistest.Server { return servers }
	}
	matrix.Run(t,
		matrix.Row{Mechanism: "redislock", Group: "lock", Workloads: matrix.Workloads,
			Open: redisOpen(on([]*redistest.Server{one}), true),
			Faults: []matrix.Fault{
				{Name: "restart without persistence", Expect: matrix.Unsafe, Run: restartFault(1, 1)},
				{Name: "primary failover", Expect: matrix.Unsafe, Run: failoverFault(false)},
				{Name: "primary failover + replica wait", Expect: matrix.Safe, Run: failoverFault(true)},
				{Name: "holder paused past TTL (fenced)", Expect: matrix.Safe, Run: pausedFault(1, true)},
				{Name: "partitioned by proxy", Expect: matrix.Safe, Run: partitionedFault(true)},
			}},
		matrix.Row{Mechanism: "redislock (unfenced)", Group: "lock",
			Open: redisOpen(on([]*redistest.Server{one}), false),
			Faults: []matrix.Fault{
				{Name: "holder paused past TTL (unfenced)", Expect: matrix.Unsafe, Run: pausedFault(1, false)},
				{Name: "partitioned by proxy", Expect: matrix.Unsafe, Run: partitionedFault(false)},
			}},
		matrix.Row{Mechanism: "Redlock-5", Group: "lock", Workloads: matrix.Workloads,
			Open: redisOpen(on(five), false),
			Faults: []matrix.Fault{
				{Name: "restart without persistence", Expect: matrix.Safe, Run: restartFault(5, 1)},
				{Name: "restart without persistence (3 of 5)", Expect: matrix.Unsafe, Run: restartFault(5, 3)},
				{Name: "holder paused past TTL (unfenced)", Expect: matrix.Unsafe, Run: pausedFault(5, false)},
			}},
	)
}

// countHook counts a client's requests on a cell's RoundTrips (a pipeline
// is one round trip: WithReplicas sends its WAIT in the script's), and,
// when refusals is not nil, signals on it each grant a server refused —
// the Locker's acquiring script answering {0, pttl}, Redlock's SET NX
// answering nil — so that a fault can wait until a second holder has been
// turned away.
type countHook struct {
	rt       *matrix.RoundTrips
	refusals chan struct{}
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.rt.Add(1)
		err := next(ctx, cmd)
		h.answered(cmd)
		return err
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.rt.Add(1)
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.answered(cmd)
		}
		return err
	}
}

func (h *countHook) answered(cmd redis.Cmder) {
	if h.refusals == nil || cmd.Err() != nil {
		return
	}
	refused := false
	switch c := cmd.(type) {
	case *redis.BoolCmd:
		refused = c.Name() == "set" && !c.Val()
	case *redis.Cmd:
		v, ok := c.Val().([]any)
		refused = ok && strings.HasPrefix(c.Name(), "eval") && len(v) == 2 && v[0] == int64(0)
	}
	if refused {
		select {
		case h.refusals <- struct{}{}:
		default:
		}
	}
}

// acquirer is the row's lock on servers — a Locker on one, a Redlock on
// several — with every request counted on h and the locks lasting ttl.
func acquirer(t testing.TB, servers []*redistest.Server, h *countHook, ttl time.Duration, opts ...redislock.Option) sqlock.Acquirer {
	return acquirerOf(clients(t, servers), h, ttl, opts...)
}

func acquirerOf(cs []redis.UniversalClient, h *countHook, ttl time.Duration, opts ...redislock.Option) sqlock.Acquirer {
	for _, c := range cs {
		c.AddHook(h)
	}
	opts = append([]redislock.Option{redislock.WithTimeout(time.Minute)}, opts...)
	if len(cs) == 1 {
		return redislock.New(cs[0], opts...).Acquirer(ttl)
	}
	return redislock.NewRedlock(cs, opts...).Acquirer(ttl)
}

// redisOpen is a row's Open: every contender's operation is guarded by a
// lock on the servers, fenced with its token or not.
func redisOpen(servers func() []*redistest.Server, fenced bool) func(context.Context, *matrix.Cell) ([]matrix.Actor, func(), error) {
	return func(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
		locks := acquirer(c.T, servers(), &countHook{rt: c.RoundTrips}, matrixTTL)
		actors := make([]matrix.Actor, c.Contenders)
		for i := range actors {
			actors[i] = matrix.Guarded(c, c.DB, locks, fenced)
		}
		return actors, nil, nil
	}
}

// secondHolder is the fault of a store that forgets a grant: holder A
// takes the lock of one order and reads it (unpaid); inject runs; holder B
// runs the whole operation on the same order; A writes what it read once B
// has finished, or once quorum of B's servers have refused it a grant
// (one attempt turned away: it waits, as it must). If B got the lock A
// holds, B has written by then and A charges the order a second time; if
// not, A writes and releases and B finds the order charged.
func secondHolder(ctx context.Context, f *matrix.FaultRun, c *matrix.Cell, quorum int, a, b func(q matrix.Querier, h *countHook) matrix.Actor, inject func() error) error {
	key := c.State.Key(0)
	h, err := f.Hold(ctx, c, key, func(q matrix.Querier) matrix.Actor { return a(q, &countHook{rt: c.RoundTrips}) })
	if err != nil {
		return fmt.Errorf("holder A: %w", err)
	}
	err = inject()
	bDone := make(chan struct{})
	hb := &countHook{rt: c.RoundTrips, refusals: make(chan struct{}, quorum)}
	if err == nil {
		go func() {
			defer close(bDone)
			f.Do(ctx, b(c.DB, hb), key)
		}()
	wait:
		for refused := 0; refused < quorum; {
			select {
			case <-bDone:
				break wait
			case <-hb.refusals:
				refused++
			case <-ctx.Done():
				break wait
			}
		}
	} else {
		close(bDone)
	}
	h.Wait(ctx)
	<-bDone
	return err
}

// restartFault: of n servers, restarted of them are killed and started
// again without persistence (what they held is gone) while A holds the
// lock, then B tries. One server: B gets the lock A holds, A's token
// (fenced) is no help, since B's counter restarted below it. Redlock over
// five with one restarted: A still holds four, B waits. With three
// restarted B gets a majority while A holds the lock: the case Redlock's
// documentation states it does not survive.
func restartFault(n, restarted int) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		servers := redistest.NewN(f.T, n, redistest.Options{})
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 2, matrix.HotKey, 1)
		if err != nil {
			return err
		}
		fenced := n == 1
		actor := func(q matrix.Querier, h *countHook) matrix.Actor {
			return matrix.Guarded(c, q, acquirer(f.T, servers, h, matrixTTL), fenced)
		}
		f.Note("%d of %d redis-server restarted (SIGKILL, no persistence) while holder A is between its read and its write; then holder B", restarted, n)
		return secondHolder(ctx, f, c, n/2+1, actor, actor, func() error {
			for _, s := range servers[:restarted] {
				if err := s.Restart(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// failoverFault: a primary and its replica; the replica is cut off from
// what the primary takes next (paused, its link dropped), the primary is
// killed and the replica promoted while A holds the lock, then B tries on
// the promoted replica. A's client follows the primary, as a Sentinel
// client does, so its release reaches the promoted replica. Without
// WithReplicas the cut comes before A's grant, which the replica never
// receives: B gets the lock, with A's token. With WithReplicas(1) A's grant
// waited for the replica's acknowledgement, the cut comes after it, and B
// waits until A releases. B's Locker does not wait for replicas: the
// promoted server has none left.
func failoverFault(replicaWait bool) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		primary := redistest.New(f.T, redistest.Options{})
		replica := redistest.New(f.T, redistest.Options{ReplicaOf: primary.Addr})
		if err := primary.WaitReplicas(ctx, 1); err != nil {
			return err
		}
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 2, matrix.HotKey, 1)
		if err != nil {
			return err
		}
		cut := func() error {
			if err := replica.Pause(); err != nil {
				return err
			}
			return primary.DropReplicas(ctx)
		}
		var opts []redislock.Option
		if replicaWait {
			opts = append(opts, redislock.WithReplicas(1, 500*time.Millisecond))
			f.Note("WithReplicas(1, 500ms): A's grant acknowledged, then the replica cut off (paused, link dropped), the primary killed, the replica promoted; B on the promoted replica")
		} else if err := cut(); err != nil {
			return err
		} else {
			f.Note("the replica cut off (paused, link dropped) before A's grant, the primary killed, the replica promoted; B on the promoted replica")
		}
		var current atomic.Pointer[string]
		current.Store(&primary.Addr)
		a := func(q matrix.Querier, h *countHook) matrix.Actor {
			follow := primary.Client(f.T, func(o *redis.Options) {
				o.ContextTimeoutEnabled = true
				o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, *current.Load())
				}
			})
			return matrix.Guarded(c, q, acquirerOf([]redis.UniversalClient{follow}, h, matrixTTL, opts...), true)
		}
		b := func(q matrix.Querier, h *countHook) matrix.Actor {
			return matrix.Guarded(c, q, acquirer(f.T, []*redistest.Server{replica}, h, matrixTTL), true)
		}
		err = secondHolder(ctx, f, c, 1, a, b, func() error {
			if replicaWait {
				if err := cut(); err != nil {
					return err
				}
			}
			if err := primary.Kill(); err != nil {
				return err
			}
			if err := replica.Resume(); err != nil {
				return err
			}
			if err := replica.Promote(ctx); err != nil {
				return err
			}
			current.Store(&replica.Addr)
			return nil
		})
		// Reachable again for whatever runs next (as an empty primary).
		if serr := primary.Start(ctx); err == nil {
			err = serr
		}
		return err
	}
}

// partitionedFault: holder A's client reaches the server through
// pgtest's TCP proxy. A holds an order's lock (a short TTL) and has read
// the order; the proxy stalls, so A's renewals stop and its key expires on
// the server. B, on a client of its own, gets the lock and charges the
// order; the partition heals and A writes what it read: fenced, its token
// is older than B's and PostgreSQL refuses the write; unfenced, the order
// is charged twice. A is the fault, not one of its operations: what it did
// is in the note.
func partitionedFault(fenced bool) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		s := redistest.New(f.T, redistest.Options{})
		p := pgtest.StartTCPProxy(f.T, s.Addr)
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 2, matrix.HotKey, 1)
		if err != nil {
			return err
		}
		const ttl = 300 * time.Millisecond
		proxied := s.Client(f.T, func(o *redis.Options) {
			o.Addr = p.Addr()
			o.ContextTimeoutEnabled = true
		})
		a := func(q matrix.Querier) matrix.Actor {
			return matrix.Guarded(c, q, acquirerOf([]redis.UniversalClient{proxied}, &countHook{rt: c.RoundTrips}, ttl), fenced)
		}
		// B waits for A's key to expire on the server, however long that
		// takes here.
		b := matrix.Guarded(c, c.DB, acquirer(f.T, []*redistest.Server{s}, &countHook{rt: c.RoundTrips}, matrixTTL), fenced)
		return f.Partitioned(ctx, c, p, a, b,
			fmt.Sprintf("A's client through a proxy, stalled while A held the order's lock (TTL %v) and had read it", ttl), "B")
	}
}

// pausedFault: matrix.PausedHolder on n servers, B's lock taken there.
func pausedFault(n int, fenced bool) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		servers := redistest.NewN(f.T, n, redistest.Options{})
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 1, matrix.HotKey, 1)
		if err != nil {
			return err
		}
		var addrs []string
		for _, s := range servers {
			addrs = append(addrs, s.Addr)
		}
		backend, err := json.Marshal(addrs)
		if err != nil {
			return err
		}
		b := matrix.Guarded(c, c.DB, acquirer(f.T, servers, &countHook{rt: c.RoundTrips}, matrixTTL), fenced)
		return f.PausedHolder(ctx, c, matrix.HolderSpec{TTL: 300 * time.Millisecond, Fenced: fenced, Backend: backend}, b)
	}
}

// openHolder is the paused holder's lock: on the servers spec.Backend
// lists, one (a Locker) or several (Redlock, which has no token).
func openHolder(_ context.Context, spec matrix.HolderSpec) (sqlock.Acquirer, func(), error) {
	var addrs []string
	if err := json.Unmarshal(spec.Backend, &addrs); err != nil {
		return nil, nil, err
	}
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	}
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	if len(cs) == 1 {
		return redislock.New(cs[0]).Acquirer(spec.TTL), closeAll, nil
	}
	return redislock.NewRedlock(cs).Acquirer(spec.TTL), closeAll, nil
}
