package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"

	"github.com/sqlock/sqlock/etcdlock"
	"github.com/sqlock/sqlock/etcdlock/internal/etcdtest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// The comparison with etcd's own concurrency.Mutex lives here, not in a
// benchmark module of its own as the Redis comparisons do: the Mutex is
// in go.etcd.io/etcd/client/v3, which etcdlock already depends on, so the
// library gains no dependency by it.

// roundTrips counts a client's requests to the cluster: every unary call,
// and every message sent on a stream (a watch's creation, a keepalive).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.n.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return countedStream{s, r}, nil
		}),
	}
}

type countedStream struct {
	grpc.ClientStream
	r *roundTrips
}

func (s countedStream) SendMsg(m any) error {
	s.r.n.Add(1)
	return s.ClientStream.SendMsg(m)
}

// countedClient is a client of endpoints whose requests rt counts.
func countedClient(b *testing.B, endpoints []string, rt *roundTrips) *clientv3.Client {
	cfg := etcdtest.Config(endpoints...)
	cfg.DialOptions = rt.dialOptions()
	cl, err := clientv3.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	return cl
}

// benchGoroutines is how many goroutines take locks at once.
const benchGoroutines = 8

// BenchmarkAcquireRelease: acquire+release throughput, its p50 and p99,
// and the round trips per acquire+release, of etcdlock (a lease per lock,
// and WithSharedLease) beside etcd's own
// concurrency.Mutex on a session reused by each goroutine (the Mutex's
// fastest form: one lease for all its locks), in the same run, each with
// a client of its own. 8 goroutines take one name (each waits in line:
// one-name) or a name each (many-names), on the shared three-member
// cluster over loopback and through a TCP proxy per member that delays
// each direction 0.25 ms (rtt=0.5ms, as redislock's network benchmark).
// Every lock has a 10 s TTL, far longer than a run's holds, so no lock
// needs a keepalive but a waiter's or a session's. ns/op is the wall time
// per acquire+release of all goroutines together (1/throughput).
func BenchmarkAcquireRelease(b *testing.B) {
	endpoints := strings.Split(os.Getenv("ETCD_ENDPOINTS"), ",")
	for _, net := range []struct {
		name   string
		oneWay time.Duration
	}{{"loopback", 0}, {"rtt=0.5ms", 250 * time.Microsecond}} {
		for _, shape := range []string{"one-name", "many-names"} {
			b.Run(net.name+"/"+shape, func(b *testing.B) {
				eps := endpoints
				if net.oneWay > 0 {
					eps = nil
					for _, e := range endpoints {
						p := pgtest.StartTCPProxy(b, strings.TrimPrefix(e, "http://"))
						if err := p.SetDelay(pgtest.BothWays, net.oneWay, 0); err != nil {
							b.Fatal(err)
						}
						eps = append(eps, "http://"+p.Addr())
					}
				}
				name := func(g int) string {
					if shape == "one-name" {
						return "bench-" + net.name + "-one"
					}
					return fmt.Sprintf("bench-%s-many-%d", net.name, g)
				}
				var lrt, srt, mrt roundTrips
				lk := etcdlock.New(countedClient(b, eps, &lrt), etcdlock.WithTimeout(time.Minute))
				sk := etcdlock.New(countedClient(b, eps, &srt), etcdlock.WithTimeout(time.Minute), etcdlock.WithSharedLease())
				mcl := countedClient(b, eps, &mrt)
				sessions := make([]*concurrency.Session, benchGoroutines)
				for g := range sessions {
					s, err := concurrency.NewSession(mcl, concurrency.WithTTL(10))
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					sessions[g] = s
				}
				ctx := context.Background()
				libs := []benchLib{
					{"etcdlock", &lrt, func(g int) error {
						l, err := lk.Acquire(ctx, name(g), 10*time.Second)
						if err != nil {
							return err
						}
						return l.Release(ctx)
					}},
					{"etcdlock-shared", &srt, func(g int) error {
						l, err := sk.Acquire(ctx, name(g)+"-shared", 10*time.Second)
						if err != nil {
							return err
						}
						return l.Release(ctx)
					}},
					{"mutex", &mrt, func(g int) error {
						m := concurrency.NewMutex(sessions[g], "sqlock-bench-mutex/"+name(g))
						if err := m.Lock(ctx); err != nil {
							return err
						}
						return m.Unlock(ctx)
					}},
				}
				b.ResetTimer()
				var res [3]benchResult
				// Half the operations each, in turn, the order swapped
				// halfway, so that a load that changes during the run
				// falls on both alike.
				for half, order := range [][]int{{0, 1, 2}, {2, 1, 0}} {
					n := b.N / 2
					if half == 1 {
						n = b.N - n
					}
					for _, i := range order {
						libs[i].run(b, n, &res[i])
					}
				}
				for i, l := range libs {
					res[i].report(b, l.name)
				}
				b.ReportMetric(float64(res[2].took)/float64(res[0].took), "mutex/etcdlock")
				b.ReportMetric(float64(res[2].took)/float64(res[1].took), "mutex/etcdlock-shared")
			})
		}
	}
}

// benchLib is one library's acquire+release by goroutine g.
type benchLib struct {
	name string
	rt   *roundTrips
	op   func(g int) error
}

// benchResult is what a library's runs measured.
type benchResult struct {
	took time.Duration   // wall time
	lats []time.Duration // each acquire+release's
	n    int64           // acquire+releases
	rts  int64           // round trips
}

// run does n operations on benchGoroutines goroutines, adding their wall
// time, latencies and round trips to res.
func (l benchLib) run(b *testing.B, n int, res *benchResult) {
	var next atomic.Int64
	lats := make([][]time.Duration, benchGoroutines)
	rt0 := l.rt.n.Load()
	t0 := time.Now()
	var wg sync.WaitGroup
	for g := range benchGoroutines {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				s := time.Now()
				if err := l.op(g); err != nil {
					b.Error(l.name, err)
					return
				}
				lats[g] = append(lats[g], time.Since(s))
			}
		})
	}
	wg.Wait()
	res.took += time.Since(t0)
	res.lats = append(res.lats, slices.Concat(lats...)...)
	res.n += int64(n)
	res.rts += l.rt.n.Load() - rt0
}

// report reports the figures of the library called name.
func (r *benchResult) report(b *testing.B, name string) {
	if r.n == 0 || len(r.lats) == 0 {
		return
	}
	slices.Sort(r.lats)
	b.ReportMetric(float64(r.took.Nanoseconds())/float64(r.n), name+"-ns/op")
	b.ReportMetric(float64(r.lats[len(r.lats)/2].Nanoseconds()), name+"-p50-ns")
	b.ReportMetric(float64(r.lats[len(r.lats)*99/100].Nanoseconds()), name+"-p99-ns")
	b.ReportMetric(float64(r.rts)/float64(r.n), name+"-roundtrips/op")
}
