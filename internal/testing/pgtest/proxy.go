package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Direction is one way through a [Proxy], or both.
type Direction uint8

const (
	// ToServer is the client-to-server direction.
	ToServer Direction = 1 << iota
	// ToClient is the server-to-client direction.
	ToClient
	// BothWays is both directions.
	BothWays = ToServer | ToClient
)

// Proxy is a simulated network between clients and a server: a TCP proxy
// on a free 127.0.0.1 port that forwards every connection it accepts to
// the server, delaying each direction by a one-way delay plus jitter, and
// that can stall (stop forwarding, connections left open) and cut (close
// every connection, as a network failure would). Settings may change while
// connections are open. A delayed byte stream is never reordered: a chunk
// read at t is written at t + delay + a jitter drawn uniformly from
// [0, jitter), or after the chunk before it, whichever is later — so the
// delay is a lower bound on each byte's one-way trip.
type Proxy struct {
	// DSN connects through the proxy to the database of the DSN it was
	// started for.
	DSN string

	network, target string // dialled for each accepted connection
	ln              net.Listener

	delay, jitter [2]atomic.Int64               // ns, indexed by way (0 to the server, 1 to the client)
	gate          atomic.Pointer[chan struct{}] // non-nil while stalled; closed by Resume

	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartProxy puts a [Proxy] in front of the server dsn names; its DSN field
// connects through it. It is closed when the test ends.
func StartProxy(tb testing.TB, dsn string) *Proxy {
	tb.Helper()
	p, err := RunProxy(dsn)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// StartSlowProxy is [StartProxy] with every byte delayed by oneWay in each
// direction: a server a round trip of 2 × oneWay away.
func StartSlowProxy(tb testing.TB, dsn string, oneWay time.Duration) *Proxy {
	tb.Helper()
	p := StartProxy(tb, dsn)
	if err := p.SetDelay(BothWays, oneWay, 0); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return p
}

// RunProxy is [StartProxy] without a testing.TB: the caller closes the
// proxy. A DSN whose host is a directory names the server's Unix socket.
func RunProxy(dsn string) (*Proxy, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgtest: proxy: %w", err)
	}
	network, target := "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if strings.HasPrefix(cfg.Host, "/") {
		network, target = "unix", filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	p, err := listenProxy(network, target)
	if err != nil {
		return nil, err
	}
	p.DSN = withHostPort(dsn, "127.0.0.1", p.Port())
	return p, nil
}

// listenProxy starts a proxy to target on a free loopback port.
func listenProxy(network, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgtest: proxy: %w", err)
	}
	p := &Proxy{network: network, target: target, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// withHostPort is dsn (URL or keyword/value form) with its host and port
// replaced.
func withHostPort(dsn, host string, port int) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			u.Host = net.JoinHostPort(host, strconv.Itoa(port))
			q := u.Query()
			q.Del("host")
			q.Del("port")
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	// In keyword/value form the last occurrence of a keyword wins.
	return fmt.Sprintf("%s host=%s port=%d", dsn, host, port)
}

// Addr is the address the proxy listens on (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the port the proxy listens on.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetDelay sets the one-way delay and jitter of the directions dir names,
// for bytes read from now on (bytes already on their way keep theirs).
// Each chunk is delayed by delay plus a jitter drawn uniformly from
// [0, jitter).
func (p *Proxy) SetDelay(dir Direction, delay, jitter time.Duration) error {
	if delay < 0 || jitter < 0 || dir == 0 || dir&^BothWays != 0 {
		return fmt.Errorf("pgtest: proxy delay %v, jitter %v, direction %d: want durations ≥ 0 and ToServer, ToClient or BothWays",
			delay, jitter, dir)
	}
	for i, d := range []Direction{ToServer, ToClient} {
		if dir&d != 0 {
			p.delay[i].Store(int64(delay))
			p.jitter[i].Store(int64(jitter))
		}
	}
	return nil
}

// lag is the delay of a chunk read now in way i.
func (p *Proxy) lag(i int) time.Duration {
	d := p.delay[i].Load()
	if j := p.jitter[i].Load(); j > 0 {
		d += rand.Int64N(j)
	}
	return time.Duration(d)
}

// Stall stops forwarding in both directions until [Proxy.Resume]:
// connections stay open and are still accepted, bytes are read and held
// (up to a bounded buffer per connection, then TCP pushes back). Nothing
// the proxy reads after Stall returns reaches the other side before
// Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate.Load() == nil {
		g := make(chan struct{})
		p.gate.Store(&g)
	}
}

// Resume ends a stall: the bytes held are forwarded, in order, each no
// earlier than its delay allows.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g := p.gate.Load(); g != nil {
		p.gate.Store(nil)
		close(*g)
	}
}

// Cut closes every connection open through the proxy, with a reset (the
// bytes held are dropped), as a network failure would: their clients see
// a connection error. New connections are accepted as before.
func (p *Proxy) Cut() {
	for _, c := range p.open() {
		c.cut()
	}
}

// Close stops accepting, closes every connection and returns once every
// goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range p.open() {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) open() []*proxyConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

// waitOpen waits while the proxy is stalled; false if done ended first.
func (p *Proxy) waitOpen(done <-chan struct{}) bool {
	for {
		g := p.gate.Load()
		if g == nil {
			return true
		}
		select {
		case <-*g:
		case <-done:
			return false
		}
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of file descriptors, say: try again shortly
			time.Sleep(5 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.handle(client)
	}
}

// handle connects an accepted client to the server and starts its two
// directions: a reader and a writer each.
func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout(p.network, p.target, 10*time.Second)
	if err != nil {
		client.Close()
		return
	}
	c := &proxyConn{p: p, client: client, server: server, done: make(chan struct{})}
	c.open.Store(2)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	for i, ends := range [2][2]net.Conn{{client, server}, {server, client}} {
		f := &flow{c: c, way: i, src: ends[0], dst: ends[1], queue: make(chan chunk, flowQueue)}
		p.wg.Add(2)
		go f.read()
		go f.write()
	}
}

// proxyConn is one client connection and its server connection.
type proxyConn struct {
	p              *Proxy
	client, server net.Conn
	done           chan struct{} // closed when the connection is torn down
	once           sync.Once
	open           atomic.Int32 // directions not yet ended by an EOF
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.server.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// cut closes the connection with a TCP reset on both sides.
func (c *proxyConn) cut() {
	for _, conn := range []net.Conn{c.client, c.server} {
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
	c.close()
}

// flowQueue bounds the chunks a direction holds (delayed or stalled)
// before its reader stops reading and TCP pushes back on the sender.
const flowQueue = 256

// chunk is what one read returned, and when the other side may see it.
type chunk struct {
	data []byte
	at   time.Time
	eof  bool
}

// flow is one direction of a connection: read moves chunks into queue,
// stamped with their release time, and write releases them in order.
type flow struct {
	c        *proxyConn
	way      int
	src, dst net.Conn
	queue    chan chunk
	pending  atomic.Int64 // chunks read and not yet written
}

func (f *flow) read() {
	p := f.c.p
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	var last time.Time
	for {
		n, err := f.src.Read(buf)
		if n > 0 {
			now := time.Now()
			at := later(now.Add(p.lag(f.way)), last) // never overtake the chunk before
			last = at
			if !at.After(now) && f.pending.Load() == 0 && p.gate.Load() == nil {
				// Nothing to wait for and nothing queued (the writer is
				// idle, since only this goroutine adds chunks): write
				// here, sparing a hand-off between goroutines.
				if _, err := f.dst.Write(buf[:n]); err != nil {
					f.c.close()
					return
				}
			} else if !f.push(chunk{data: bytes.Clone(buf[:n]), at: at}) {
				return
			}
		}
		if err == io.EOF { // a FIN travels like the bytes before it
			f.push(chunk{eof: true, at: later(time.Now().Add(p.lag(f.way)), last)})
			return
		}
		if err != nil {
			f.c.close()
			return
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

func (f *flow) push(ch chunk) bool {
	f.pending.Add(1)
	select {
	case f.queue <- ch:
		return true
	case <-f.c.done:
		return false
	}
}

func (f *flow) write() {
	p := f.c.p
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var precise sleeper
	defer precise.close()
	for {
		var ch chunk
		select {
		case ch = <-f.queue:
		case <-f.c.done:
			return
		}
		if !sleepUntil(timer, &precise, ch.at, f.c.done) || !p.waitOpen(f.c.done) {
			return
		}
		if ch.eof {
			f.endWrite()
			return
		}
		if _, err := f.dst.Write(ch.data); err != nil {
			f.c.close()
			return
		}
		f.pending.Add(-1)
	}
}

// endWrite passes an EOF on (a half close); the connection is closed when
// both directions have ended.
func (f *flow) endWrite() {
	if cw, ok := f.dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil && f.c.open.Add(-1) > 0 {
		return
	}
	f.c.close()
}

// preciseBelow is the wait below which sleepUntil uses a sleeper: the
// runtime's timers wake no sooner than about a millisecond after they are
// set when the process is otherwise idle, which would turn a 0.25 ms delay
// into 1 ms.
const preciseBelow = 2 * time.Millisecond

// sleepUntil waits until t; false if done ended first. The last
// preciseBelow of the wait is not interrupted by done.
func sleepUntil(timer *time.Timer, precise *sleeper, t time.Time, done <-chan struct{}) bool {
	if d := time.Until(t) - preciseBelow; d > 0 {
		timer.Reset(d)
		select {
		case <-timer.C:
		case <-done:
			return false
		}
	}
	for d := time.Until(t); d > 0; d = time.Until(t) {
		precise.sleep(d)
	}
	return true
}
