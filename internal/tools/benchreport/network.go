package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// netBenchmarks are the benchmarks run a second time with every
// connection through the latency proxy: those whose ratios round trips
// decide. The others (pure CPU, their own clusters, Redis) are
// loopback-only. Each entry is one go test run, so a pattern may filter
// sub-benchmarks of its own (a benchmark without sub-benchmarks does not
// report under a pattern with a sub-benchmark level: give it an entry of
// its own).
var netBenchmarks = []struct{ pkg, pattern string }{
	{"./txlock", "^BenchmarkUncontended$"},
	{"./advisory", "^BenchmarkCycleRatio$"},
	{"./versioned", "^BenchmarkUpdate$/^interleaved$"},
	{"./sqlxhelpers", "^BenchmarkUpdateVsHandWritten$"},
	{"./gormplugin", "^BenchmarkPostgresPaired$"},
	{"./lease", "^Benchmark(AcquireRelease|GuardedWrite)$"},
	{"./lease", "^BenchmarkGuardedBegin$/^lag-0s$"},
	{"./idem", "."},
}

// netRun is what the network section measured.
type netRun struct {
	rtt      time.Duration // the round-trip delay the proxy adds (half each way)
	cost     proxyCost     // the proxy's own cost, at zero delay
	before   rttSample     // SELECT 1 through the delayed proxy, before the benchmarks
	after    rttSample     // and after them
	benches  []bench
	raw      []byte
	benchtim string
}

// proxyCost compares SELECT 1 direct and through the proxy at zero delay,
// interleaved in blocks: the time each takes and the CPU this process
// (client and proxy) spends per round trip; the client's share is the
// same on both sides, so the difference is the proxy's.
type proxyCost struct {
	direct, proxied       time.Duration // median round trip
	directCPU, proxiedCPU time.Duration // process CPU per round trip
	n                     int           // round trips per side
}

type rttSample struct{ direct, proxied time.Duration }

// runNetwork puts a proxy in front of the server dsn names, measures its
// cost at zero delay, sets the delay to rtt (half each way, no jitter)
// and runs netBenchmarks with DATABASE_URL pointing through it.
func runNetwork(ctx context.Context, dsn string, rtt time.Duration, count int, benchtime string) (*netRun, error) {
	proxy, err := pgtest.RunProxy(dsn)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	r := &netRun{rtt: rtt, benchtim: benchtime}
	fmt.Fprintln(os.Stderr, "proxy cost: SELECT 1 direct and through the proxy at zero delay…")
	if r.cost, err = measureProxy(ctx, dsn, proxy.DSN); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "  direct %v (%v CPU), proxied %v (%v CPU) per round trip\n",
		r.cost.direct, r.cost.directCPU, r.cost.proxied, r.cost.proxiedCPU)
	if err := proxy.SetDelay(pgtest.BothWays, rtt/2, 0); err != nil {
		return nil, err
	}
	if r.before, err = sampleRTT(ctx, dsn, proxy.DSN); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "network benchmarks at %v round-trip time (SELECT 1: %v through the proxy, %v direct)…\n",
		rtt, r.before.proxied, r.before.direct)
	var out bytes.Buffer
	for _, nb := range netBenchmarks {
		cmd := exec.Command("go", "test", "-run", "^$", "-bench", nb.pattern, "-benchmem",
			"-benchtime", benchtime, "-count", strconv.Itoa(count), "-timeout", "20m", nb.pkg)
		cmd.Env = append(os.Environ(), pgtest.EnvDSN+"="+proxy.DSN)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, os.Stderr
		if err := cmd.Run(); err != nil {
			os.Stderr.Write(buf.Bytes())
			return nil, fmt.Errorf("network benchmarks %s: %w", nb.pkg, err)
		}
		out.Write(buf.Bytes())
	}
	if r.after, err = sampleRTT(ctx, dsn, proxy.DSN); err != nil {
		return nil, err
	}
	r.raw = out.Bytes()
	r.benches = parse(out.String())
	return r, nil
}

// measureProxy runs SELECT 1 on a direct connection and on one through the
// proxy: alternating one by one for the time (so that both see the same
// load), and in alternating blocks for the CPU (which getrusage measures
// per block).
func measureProxy(ctx context.Context, dsn, proxied string) (proxyCost, error) {
	const rounds, block = 8, 250
	conns, err := connect(ctx, dsn, proxied)
	if err != nil {
		return proxyCost{}, err
	}
	defer closeAll(conns)
	var lat [2][]time.Duration
	for i := range 2 * rounds * block {
		side := i % 2
		t0 := time.Now()
		if _, err := conns[side].Exec(ctx, "SELECT 1"); err != nil {
			return proxyCost{}, err
		}
		lat[side] = append(lat[side], time.Since(t0))
	}
	var cpu [2]time.Duration
	for r := range rounds {
		for k := range 2 {
			side := (r + k) % 2
			c0 := processCPU()
			for range block {
				if _, err := conns[side].Exec(ctx, "SELECT 1"); err != nil {
					return proxyCost{}, err
				}
			}
			cpu[side] += processCPU() - c0
		}
	}
	n := rounds * block
	return proxyCost{
		direct: medianDuration(lat[0]), proxied: medianDuration(lat[1]),
		directCPU: cpu[0] / time.Duration(n), proxiedCPU: cpu[1] / time.Duration(n), n: n,
	}, nil
}

// sampleRTT is the median SELECT 1 direct and through the proxy.
func sampleRTT(ctx context.Context, dsn, proxied string) (rttSample, error) {
	conns, err := connect(ctx, dsn, proxied)
	if err != nil {
		return rttSample{}, err
	}
	defer closeAll(conns)
	var lat [2][]time.Duration
	for i := range 400 {
		side := i % 2
		t0 := time.Now()
		if _, err := conns[side].Exec(ctx, "SELECT 1"); err != nil {
			return rttSample{}, err
		}
		lat[side] = append(lat[side], time.Since(t0))
	}
	return rttSample{direct: medianDuration(lat[0]), proxied: medianDuration(lat[1])}, nil
}

func connect(ctx context.Context, dsns ...string) ([]*pgx.Conn, error) {
	var conns []*pgx.Conn
	for _, d := range dsns {
		c, err := pgx.Connect(ctx, d)
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		// Warm: the first statements of a connection cost more.
		for range 20 {
			if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
				closeAll(append(conns, c))
				return nil, err
			}
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []*pgx.Conn) {
	for _, c := range conns {
		c.Close(context.Background())
	}
}

func medianDuration(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// processCPU is the user and system CPU this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
