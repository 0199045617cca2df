package redislock_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// countingClient is a one-connection client of s that counts the writes
// its connection makes to the server: with no pipelining, one write per
// round trip.
func countingClient(tb testing.TB, s *redistest.Server) (*redis.Client, *atomic.Int64) {
	var writes atomic.Int64
	c := s.Client(tb, func(o *redis.Options) {
		o.PoolSize, o.MinIdleConns = 1, 1
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{conn, &writes}, nil
		}
	})
	return c, &writes
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// BenchmarkAcquireRelease: TryAcquire + Release on one server against the
// same two scripts sent by hand (EVALSHA) on the same connection,
// interleaved (alternating which goes first) so that both are measured in
// the same run under the same load. It reports each one's time and round trips per operation and the
// package's time over the hand-written one's (of the totals, and of the
// medians).
func BenchmarkAcquireRelease(b *testing.B) {
	s := redistest.New(b, redistest.Options{})
	c, writes := countingClient(b, s)
	lk := redislock.New(c)
	acquire, release := redislock.Scripts()
	ctx := context.Background()
	keys := []string{"bench", redislock.FenceKey("bench"), "bench" + redislock.FenceSuffix} // as the package sends them
	owner := "0123456789abcdef0123456789abcdef"
	pkg := func() {
		l, err := lk.TryAcquire(ctx, "bench", time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	hand := func() {
		if err := c.EvalSha(ctx, acquire, keys, owner, 1000).Err(); err != nil {
			b.Fatal(err)
		}
		if n, err := c.EvalSha(ctx, release, keys[:1], owner).Int64(); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
	pkg()
	hand() // warm: the scripts are loaded, the connection open
	var tp, th time.Duration
	var wp, wh int64
	ps, hs := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	measure := func(f func(), t *time.Duration, w *int64) {
		w0, t0 := writes.Load(), time.Now()
		f()
		d := time.Since(t0)
		*t += d
		*w += writes.Load() - w0
		if t == &tp {
			ps = append(ps, d)
		} else {
			hs = append(hs, d)
		}
	}
	for i := range b.N {
		// Alternate which goes first, so that neither always runs right
		// after the other's release.
		if i%2 == 0 {
			measure(pkg, &tp, &wp)
			measure(hand, &th, &wh)
		} else {
			measure(hand, &th, &wh)
			measure(pkg, &tp, &wp)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(tp.Nanoseconds())/n, "redislock-ns/op")
	b.ReportMetric(float64(th.Nanoseconds())/n, "byhand-ns/op")
	b.ReportMetric(float64(wp)/n, "redislock-roundtrips/op")
	b.ReportMetric(float64(wh)/n, "byhand-roundtrips/op")
	b.ReportMetric(float64(th)/float64(tp), "byhand/redislock")
	b.ReportMetric(float64(median(hs))/float64(median(ps)), "byhand/redislock-p50")
}

// median is the median of ds (which it sorts): unlike the mean, it does not
// move when a busy machine stalls a few iterations.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkRedlockAcquire: the time TryAcquire takes on a Redlock of 5
// servers against a single server's, interleaved in the same run, on
// loopback: there a round trip is mostly CPU, and the five servers share
// the machine's cores with the client.
func BenchmarkRedlockAcquire(b *testing.B) {
	servers := redistest.NewN(b, 5, redistest.Options{})
	redlockVsSingle(b, redislock.New(servers[0].Client(b, nil)), redislock.NewRedlock(clients(b, servers)))
}

// BenchmarkRedlockAcquireOverNetwork: the same with every server behind a
// proxy that delays each direction (internal/testing/pgtest's, which forwards
// bytes, so Redis's protocol as well as PostgreSQL's): a 0.5 ms round trip,
// and one of 0.5–0.7 ms (jitter), where what the ratio shows is whether
// Redlock's five commands travel in parallel. It also reports a PING's
// round trip through the proxy (the median of 21), which shows the delay
// is there.
func BenchmarkRedlockAcquireOverNetwork(b *testing.B) {
	servers := redistest.NewN(b, 5, redistest.Options{})
	for _, net := range []struct {
		name           string
		oneWay, jitter time.Duration
	}{
		{"rtt=0.5ms", 250 * time.Microsecond, 0},
		{"rtt=0.5-0.7ms", 250 * time.Microsecond, 100 * time.Microsecond},
	} {
		b.Run(net.name, func(b *testing.B) {
			cs := make([]redis.UniversalClient, len(servers))
			for i, s := range servers {
				p := pgtest.StartTCPProxy(b, s.Addr)
				if err := p.SetDelay(pgtest.BothWays, net.oneWay, net.jitter); err != nil {
					b.Fatal(err)
				}
				cs[i] = s.Client(b, func(o *redis.Options) {
					o.Addr = p.Addr()
					o.ContextTimeoutEnabled, o.DialerRetries, o.MaxRetries = true, 1, -1
				})
			}
			pings := make([]time.Duration, 21)
			for i := range pings {
				t0 := time.Now()
				if err := cs[0].Ping(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				pings[i] = time.Since(t0)
			}
			slices.Sort(pings)
			redlockVsSingle(b, redislock.New(cs[0]), redislock.NewRedlock(cs))
			b.ReportMetric(float64(pings[len(pings)/2].Nanoseconds()), "ping-ns")
		})
	}
}

// redlockVsSingle measures TryAcquire on single and on r, interleaved, and
// reports both and their ratio.
func redlockVsSingle(b *testing.B, single *redislock.Locker, r *redislock.Redlock) {
	ctx := context.Background()
	var ts, tr time.Duration
	ss, rs := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		key := "bench" + strconv.Itoa(i%2)
		t0 := time.Now()
		l, err := single.TryAcquire(ctx, key, time.Second)
		d := time.Since(t0)
		ts += d
		ss = append(ss, d)
		if err != nil {
			b.Fatal(err)
		}
		l.Release(ctx)
		t0 = time.Now()
		rl, err := r.TryAcquire(ctx, "r"+key, time.Second)
		d = time.Since(t0)
		tr += d
		rs = append(rs, d)
		if err != nil {
			b.Fatal(err)
		}
		rl.Release(ctx)
	}
	n := float64(b.N)
	b.ReportMetric(float64(ts.Nanoseconds())/n, "single-acquire-ns/op")
	b.ReportMetric(float64(tr.Nanoseconds())/n, "redlock5-acquire-ns/op")
	b.ReportMetric(float64(tr)/float64(ts), "redlock5/single")
	b.ReportMetric(float64(median(rs))/float64(median(ss)), "redlock5/single-p50")
}

// TestTheSimulatedNetworkDelaysRedisRoundTrips: pgtest's TCP proxy, which
// BenchmarkRedlockAcquireOverNetwork puts in front of every server,
// forwards Redis's protocol and delays it: with 0.25 ms each way, every
// PING through it takes at least 0.5 ms, and a lock is taken and released
// through it.
func TestTheSimulatedNetworkDelaysRedisRoundTrips(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{})
	p := pgtest.StartTCPProxy(t, s.Addr)
	if err := p.SetDelay(pgtest.BothWays, 250*time.Microsecond, 0); err != nil {
		t.Fatal(err)
	}
	c := s.Client(t, func(o *redis.Options) { o.Addr = p.Addr() })
	ctx := context.Background()
	for range 10 {
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d < 500*time.Microsecond {
			t.Fatalf("a PING through the proxy took %v, want ≥ 0.5 ms", d)
		}
	}
	l := must[*redislock.Lock](t)(redislock.New(c).TryAcquire(ctx, "k", time.Second))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAcquireReleaseWithReplica: TryAcquire + Release on a primary
// with one replica, with WithReplicas(1, …) against without, interleaved
// on one counting connection: the round trips per operation (the WAIT
// rides in the grant's pipeline, one write) and the time the replica's
// acknowledgement adds (of the totals and of the medians).
func BenchmarkAcquireReleaseWithReplica(b *testing.B) {
	p := redistest.New(b, redistest.Options{})
	redistest.New(b, redistest.Options{ReplicaOf: p.Addr})
	if err := p.WaitReplicas(context.Background(), 1); err != nil {
		b.Fatal(err)
	}
	c, writes := countingClient(b, p)
	plain, waited := redislock.New(c), redislock.New(c, redislock.WithReplicas(1, time.Second))
	ctx := context.Background()
	op := func(lk *redislock.Locker) func() {
		return func() {
			l, err := lk.TryAcquire(ctx, "bench", time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	fw, fp := op(waited), op(plain)
	fw()
	fp() // warm: the scripts are loaded, the connection open
	var tw, tp time.Duration
	var ww, wp int64
	ws, ps := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	measure := func(f func(), t *time.Duration, w *int64, ds *[]time.Duration) {
		w0, t0 := writes.Load(), time.Now()
		f()
		d := time.Since(t0)
		*t += d
		*w += writes.Load() - w0
		*ds = append(*ds, d)
	}
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			measure(fw, &tw, &ww, &ws)
			measure(fp, &tp, &wp, &ps)
		} else {
			measure(fp, &tp, &wp, &ps)
			measure(fw, &tw, &ww, &ws)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(tw.Nanoseconds())/n, "replicated-ns/op")
	b.ReportMetric(float64(tp.Nanoseconds())/n, "plain-ns/op")
	b.ReportMetric(float64(ww)/n, "replicated-roundtrips/op")
	b.ReportMetric(float64(wp)/n, "plain-roundtrips/op")
	b.ReportMetric(float64(tw)/float64(tp), "replicated/plain")
	b.ReportMetric(float64(median(ws))/float64(median(ps)), "replicated/plain-p50")
}
