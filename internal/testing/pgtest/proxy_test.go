package pgtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// proxyLeakCheck must be called first in a test: its cleanup runs after
// the test's proxies, servers and connections are closed, and fails the
// test if a goroutine started since is still running.
func proxyLeakCheck(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(ignore); err != nil {
			t.Error(err)
		}
	})
}

// backend is a TCP server for a proxy to forward to. With echo it sends
// back what it reads; otherwise it hands each accepted connection to the
// test on accepted.
type backend struct {
	ln       net.Listener
	accepted chan net.Conn
	wg       sync.WaitGroup
}

func startBackend(t *testing.T, network, addr string, echo bool) *backend {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{ln: ln, accepted: make(chan net.Conn, 1024)}
	var mu sync.Mutex
	var conns []net.Conn
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if !echo {
				b.accepted <- c
				continue
			}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		b.wg.Wait()
	})
	return b
}

// proxy starts a proxy in front of b, closed when the test ends.
func (b *backend) proxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := listenProxy(b.ln.Addr().Network(), b.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// dial connects through p and returns the client's end and the server's.
func (b *backend) dial(t *testing.T, p *Proxy) (client, server net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	select {
	case server = <-b.accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not connect to the backend")
	}
	return client, server
}

// readAt reads exactly len(want) bytes from c in a goroutine and sends
// when the first of them arrived, or the error.
func readAt(c net.Conn, want []byte) <-chan any {
	out := make(chan any, 1)
	go func() {
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got[:1]); err != nil {
			out <- err
			return
		}
		at := time.Now()
		if _, err := io.ReadFull(c, got[1:]); err != nil {
			out <- err
			return
		}
		if string(got) != string(want) {
			out <- fmt.Errorf("read %q, want %q", got, want)
			return
		}
		out <- at
	}()
	return out
}

func arrival(t *testing.T, ch <-chan any) time.Time {
	t.Helper()
	select {
	case v := <-ch:
		if err, ok := v.(error); ok {
			t.Fatal(err)
		}
		return v.(time.Time)
	case <-time.After(30 * time.Second):
		t.Fatal("nothing arrived")
	}
	panic("unreachable")
}

// TestProxyDelaysEachDirection: every byte's one-way trip takes at least
// its direction's delay, sub-millisecond delays included, and a change of
// delay applies to a connection already open.
func TestProxyDelaysEachDirection(t *testing.T) {
	proxyLeakCheck(t)
	b := startBackend(t, "tcp", "127.0.0.1:0", false)
	p := b.proxy(t)
	client, server := b.dial(t, p)
	for _, d := range [][2]time.Duration{
		{250 * time.Microsecond, 750 * time.Microsecond},
		{3 * time.Millisecond, 0},
		{0, 3 * time.Millisecond},
	} {
		must(t, p.SetDelay(ToServer, d[0], 0))
		must(t, p.SetDelay(ToClient, d[1], 0))
		for i := range 5 {
			msg := fmt.Appendf(nil, "ping %d", i)
			got := readAt(server, msg)
			sent := time.Now()
			client.Write(msg)
			if trip := arrival(t, got).Sub(sent); trip < d[0] {
				t.Fatalf("to the server in %v, under the delay %v", trip, d[0])
			}
			got = readAt(client, msg)
			sent = time.Now()
			server.Write(msg)
			if trip := arrival(t, got).Sub(sent); trip < d[1] {
				t.Fatalf("to the client in %v, under the delay %v", trip, d[1])
			}
		}
	}
}

// select1 times one SELECT 1 on conn.
func select1(t testing.TB, conn *pgx.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := conn.Exec(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

func connectPG(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestProxyDelaysSelect1RoundTrips: at 0.25 ms one way, a SELECT 1 through
// the proxy takes at least 0.5 ms, and at least 0.5 ms more than the
// fastest direct one (lower bounds: they hold at any speed).
func TestProxyDelaysSelect1RoundTrips(t *testing.T) {
	proxyLeakCheck(t)
	db := New(t)
	p := StartProxy(t, db.DSN)
	const oneWay = 250 * time.Microsecond
	must(t, p.SetDelay(BothWays, oneWay, 0))
	direct, proxied := connectPG(t, db.DSN), connectPG(t, p.DSN)
	var ds, ps []time.Duration
	for range 30 {
		ds = append(ds, select1(t, direct))
		ps = append(ps, select1(t, proxied))
	}
	for _, d := range ps {
		if d < 2*oneWay {
			t.Fatalf("a round trip through the proxy took %v, under 2 × %v", d, oneWay)
		}
	}
	slices.Sort(ds)
	slices.Sort(ps)
	if ps[0] < ds[0]+2*oneWay {
		t.Fatalf("fastest round trip through the proxy %v, direct %v: not %v more", ps[0], ds[0], 2*oneWay)
	}
	t.Logf("SELECT 1 at %v one way: median %v direct, %v through the proxy (+%v)",
		oneWay, ds[len(ds)/2], ps[len(ps)/2], ps[len(ps)/2]-ds[len(ds)/2])
}

// TestProxyStallHoldsTrafficUntilResume: in a stall nothing crosses in
// either direction, the connection stays open, and everything held
// arrives after Resume, in order; a PostgreSQL query and a new connection
// made during the stall complete only after it.
func TestProxyStallHoldsTrafficUntilResume(t *testing.T) {
	proxyLeakCheck(t)
	const hold = 20 * time.Millisecond // the fault's length; any length will do
	t.Run("bytes", func(t *testing.T) {
		b := startBackend(t, "tcp", "127.0.0.1:0", false)
		p := b.proxy(t)
		client, server := b.dial(t, p)
		for _, dir := range []struct {
			name     string
			from, to net.Conn
		}{{"to the server", client, server}, {"to the client", server, client}} {
			p.Stall()
			got := readAt(dir.to, []byte("one two "))
			dir.from.Write([]byte("one "))
			dir.from.Write([]byte("two "))
			time.Sleep(hold)
			resumed := time.Now()
			p.Resume()
			if at := arrival(t, got); at.Before(resumed) {
				t.Fatalf("%s: arrived at %v, %v before the resume", dir.name, at, resumed.Sub(at))
			}
		}
	})
	t.Run("postgres", func(t *testing.T) {
		db := New(t)
		p := StartProxy(t, db.DSN)
		conn := connectPG(t, p.DSN)
		p.Stall()
		query := make(chan any, 1)
		go func() {
			_, err := conn.Exec(context.Background(), "SELECT 1")
			query <- orTime(err)
		}()
		var connected *pgx.Conn
		connect := make(chan any, 1)
		go func() {
			c, err := pgx.Connect(context.Background(), p.DSN)
			connected = c
			connect <- orTime(err)
		}()
		time.Sleep(hold)
		resumed := time.Now()
		p.Resume()
		for what, ch := range map[string]<-chan any{"the query": query, "the new connection": connect} {
			if at := arrival(t, ch); at.Before(resumed) {
				t.Fatalf("%s completed %v before the resume", what, resumed.Sub(at))
			}
		}
		defer connected.Close(context.Background())
		select1(t, connected)
		select1(t, conn)
	})
}

func orTime(err error) any {
	if err != nil {
		return err
	}
	return time.Now()
}

// TestProxyCutBreaksEveryConnection: after Cut every connection through
// the proxy fails — idle, delayed or stalled mid-query — and new
// connections work.
func TestProxyCutBreaksEveryConnection(t *testing.T) {
	proxyLeakCheck(t)
	db := New(t)
	p := StartProxy(t, db.DSN)
	ctx := context.Background()
	idle, stalled := connectPG(t, p.DSN), connectPG(t, p.DSN)
	p.Stall()
	query := make(chan error, 1)
	go func() {
		_, err := stalled.Exec(ctx, "SELECT 1")
		query <- err
	}()
	p.Cut()
	if err := <-query; err == nil {
		t.Fatal("a query stalled across the cut succeeded")
	}
	p.Resume()
	if _, err := idle.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a connection cut while idle still answers")
	}
	select1(t, connectPG(t, p.DSN))
}

// TestProxyKeepsOrderUnderJitter: with a jitter far larger than the gap
// between writes, and delays changed while the streams flow, every byte
// arrives in the order it was sent, on every connection.
func TestProxyKeepsOrderUnderJitter(t *testing.T) {
	proxyLeakCheck(t)
	b := startBackend(t, "tcp", "127.0.0.1:0", true)
	p := b.proxy(t)
	must(t, p.SetDelay(BothWays, 0, 2*time.Millisecond))
	const conns, n = 4, 1000
	stop := make(chan struct{})
	var changer sync.WaitGroup
	changer.Add(1)
	go func() { // settings change under traffic (the race detector watches)
		defer changer.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			p.SetDelay(Direction(1+i%3), time.Duration(i%3)*100*time.Microsecond, 2*time.Millisecond)
		}
	}()
	errs := make(chan error, conns)
	for range conns {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			go func() {
				var buf [4]byte
				for i := range uint32(n) {
					binary.BigEndian.PutUint32(buf[:], i)
					if _, err := c.Write(buf[:]); err != nil {
						return
					}
				}
			}()
			got := make([]byte, 4*n)
			if _, err := io.ReadFull(c, got); err != nil {
				errs <- err
				return
			}
			for i := range uint32(n) {
				if v := binary.BigEndian.Uint32(got[4*i:]); v != i {
					errs <- fmt.Errorf("word %d is %d: reordered", i, v)
					return
				}
			}
			errs <- nil
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	changer.Wait()
}

// TestProxyServesManyConnectionsAndClosesCleanly: a hundred echo
// connections and a pool of PostgreSQL connections at once, delayed; then
// Close with connections open and bytes held in a stall, and no goroutine
// of the proxy is left.
func TestProxyServesManyConnectionsAndClosesCleanly(t *testing.T) {
	proxyLeakCheck(t)
	b := startBackend(t, "tcp", "127.0.0.1:0", true)
	ep := b.proxy(t)
	db := New(t)
	pp := StartProxy(t, db.DSN)
	for _, p := range []*Proxy{ep, pp} {
		must(t, p.SetDelay(BothWays, 100*time.Microsecond, 100*time.Microsecond))
	}
	cfg, err := pgxpool.ParseConfig(pp.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const echoes, queries = 100, 64
	errs := make(chan error, echoes+queries)
	var open []net.Conn
	for i := range echoes {
		c, err := net.Dial("tcp", ep.Addr())
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		go func() {
			msg := fmt.Appendf(nil, "connection %d", i)
			got := make([]byte, len(msg))
			for range 10 {
				if _, err := c.Write(msg); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
					errs <- fmt.Errorf("echo %q, %v", got, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range queries {
		go func() {
			var v int
			err := pool.QueryRow(context.Background(), "SELECT $1::int", i).Scan(&v)
			if err == nil && v != i {
				err = fmt.Errorf("SELECT %d returned %d", i, v)
			}
			errs <- err
		}()
	}
	for range echoes + queries {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ep.Stall()
	for _, c := range open {
		c.Write([]byte("held"))
	}
	if err := ep.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range open {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 8)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read %d bytes, %v after Close", n, err)
		}
		c.Close()
	}
}

// TestProxyReachesAUnixSocket: a DSN naming a socket directory is proxied
// to the socket; bytes pass both ways.
func TestProxyReachesAUnixSocket(t *testing.T) {
	proxyLeakCheck(t)
	dir := t.TempDir()
	startBackend(t, "unix", filepath.Join(dir, ".s.PGSQL.5999"), true)
	p, err := RunProxy("host=" + dir + " port=5999 user=u dbname=d")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if want := fmt.Sprintf(" host=127.0.0.1 port=%d", p.Port()); p.DSN != "host="+dir+" port=5999 user=u dbname=d"+want {
		t.Fatalf("DSN %q", p.DSN)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := readAt(c, []byte("hello"))
	c.Write([]byte("hello"))
	arrival(t, got)
}

// TestProxyDSNAndSettingsRefuseBadInput: a DSN is rewritten to the proxy's
// address in either form; a negative delay or jitter, or no direction, is
// an error and changes nothing.
func TestProxyDSNAndSettingsRefuseBadInput(t *testing.T) {
	proxyLeakCheck(t)
	for in, want := range map[string]string{
		"postgres://u:pw@10.0.0.1:5432/db?sslmode=disable&host=x&port=1": "postgres://u:pw@127.0.0.1:7/db?sslmode=disable",
		"host=10.0.0.1 port=5432 dbname=db":                              "host=10.0.0.1 port=5432 dbname=db host=127.0.0.1 port=7",
	} {
		if got := withHostPort(in, "127.0.0.1", 7); got != want {
			t.Errorf("withHostPort(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := RunProxy("postgres://x:notaport/"); err == nil {
		t.Error("a bad DSN was accepted")
	}
	b := startBackend(t, "tcp", "127.0.0.1:0", true)
	p := b.proxy(t)
	must(t, p.SetDelay(BothWays, time.Millisecond, time.Millisecond))
	for _, bad := range []struct {
		dir           Direction
		delay, jitter time.Duration
	}{{BothWays, -1, 0}, {BothWays, 0, -1}, {0, 1, 1}, {BothWays + 1, 1, 1}} {
		if err := p.SetDelay(bad.dir, bad.delay, bad.jitter); err == nil {
			t.Errorf("SetDelay(%d, %v, %v) accepted", bad.dir, bad.delay, bad.jitter)
		}
	}
	for i := range 2 {
		if p.delay[i].Load() != int64(time.Millisecond) || p.jitter[i].Load() != int64(time.Millisecond) {
			t.Fatal("a refused setting changed the proxy")
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkProxySelect1 measures what the proxy costs: blocks of SELECT 1
// direct and through the proxy alternate, at zero delay (the proxy's own
// cost) and at 0.25 ms one way (the simulated network: 0.5 ms round trip).
// direct-µs and proxy-µs are the mean round trips, ratio is proxy/direct,
// and proxy-cpu-µs is the process's extra CPU time per proxied round trip
// (the client's CPU is the same in both): the proxy's own.
func BenchmarkProxySelect1(b *testing.B) {
	db := New(b)
	for _, oneWay := range []time.Duration{0, 250 * time.Microsecond} {
		b.Run(fmt.Sprintf("oneway=%v", oneWay), func(b *testing.B) {
			p := StartProxy(b, db.DSN)
			must(b, p.SetDelay(BothWays, oneWay, 0))
			conns := [2]*pgx.Conn{connectPG(b, db.DSN), connectPG(b, p.DSN)}
			var wall, cpu [2]time.Duration
			b.ResetTimer()
			const block = 100
			for done := 0; done < b.N; done += block {
				for i, conn := range conns {
					c0, t0 := cpuTime(b), time.Now()
					for range min(block, b.N-done) {
						select1(b, conn)
					}
					wall[i] += time.Since(t0)
					cpu[i] += cpuTime(b) - c0
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(wall[0].Microseconds())/n, "direct-µs")
			b.ReportMetric(float64(wall[1].Microseconds())/n, "proxy-µs")
			b.ReportMetric(float64(wall[1])/float64(wall[0]), "ratio")
			b.ReportMetric(float64((cpu[1]-cpu[0]).Microseconds())/n, "proxy-cpu-µs")
		})
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
