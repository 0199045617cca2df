// Package etcdtest runs a real etcd cluster for etcdlock's tests: n
// members on loopback, each an OS process of etcd's own server
// ([Binary]: built from go.etcd.io/etcd/server/v3 at the client's
// version into a cache on first use), on ports picked free at run time,
// each in a data directory of its own that survives its restarts.
//
// Each member is owned by a watchdog (package
// internal/testing/serverproc): when the test binary ends, however it
// ends, the member is killed and its directory removed.
//
// Fault levers, per member: [Member.Kill] (SIGKILL), [Member.Start] (again,
// with its data), [Member.Restart], [Member.Pause] (SIGSTOP) and
// [Member.Resume] (SIGCONT); for the cluster: [Cluster.Leader],
// [Cluster.KillAll] and [Cluster.StartAll] (a restart of the whole cluster
// with its data).
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

// Timing of the members' Raft: etcd's defaults. The shortest lease a
// member grants is 1.5 election timeouts, rounded up to whole seconds: 2 s.
const (
	HeartbeatInterval = 100 * time.Millisecond
	ElectionTimeout   = time.Second
)

// readyTimeout bounds each wait for a member or the cluster to serve; the
// machine may be loaded.
const readyTimeout = 60 * time.Second

// Cluster is a running etcd cluster owned by this process.
type Cluster struct {
	Members []*Member
}

// Member is one etcd server of a Cluster.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:port
	PeerURL   string
	dir       string
	proc      *serverproc.Proc

	mu     sync.Mutex
	status *clientv3.Client // a client of this member alone, for Status
}

// watchdog starts etcd, obeys "kill"/"start" lines on stdin, and on EOF
// kills the server and removes the directory.
var watchdog = serverproc.Script(`bin="$1"; dir="$2"; shift 2
start() { "$bin" "$@" >>"$dir/etcd.log" 2>&1 & pid=$!; echo "$pid"; }
start "$@"
while read -r cmd; do
  case "$cmd" in
    kill) kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; wait "$pid"; pid=; echo done ;;
    start) start "$@" ;;
  esac
done
if [ -n "$pid" ]; then kill -CONT "$pid" 2>/dev/null; halt KILL 0; fi
rm -rf "$dir"
`)

// New starts a cluster of n members for tb, closed when the test ends.
func New(tb testing.TB, n int) *Cluster {
	tb.Helper()
	c, err := Start(context.Background(), n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// Start starts a cluster of n members and waits until every member serves.
// Close stops it and removes its directories.
func Start(ctx context.Context, n int) (*Cluster, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	return serverproc.Retry(ctx, func(attempt int) (*Cluster, error) { return startOnce(ctx, bin, n, attempt) })
}

func startOnce(ctx context.Context, bin string, n, attempt int) (*Cluster, error) {
	c := &Cluster{}
	var peers []string
	for i := range n {
		cp, err1 := serverproc.FreePort()
		pp, err2 := serverproc.FreePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		m := &Member{
			Name:      "m" + strconv.Itoa(i),
			ClientURL: "http://127.0.0.1:" + strconv.Itoa(cp),
			PeerURL:   "http://127.0.0.1:" + strconv.Itoa(pp),
		}
		c.Members = append(c.Members, m)
		peers = append(peers, m.Name+"="+m.PeerURL)
	}
	token := fmt.Sprintf("sqlock-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), attempt)
	for _, m := range c.Members {
		dir, err := serverproc.TempDir("sqlock-etcd-", nil)
		if err != nil {
			c.Close()
			return nil, err
		}
		m.dir = dir
		args := []string{bin, dir,
			"--name", m.Name,
			"--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(peers, ","),
			"--initial-cluster-token", token, "--initial-cluster-state", "new",
			"--heartbeat-interval", strconv.Itoa(int(HeartbeatInterval / time.Millisecond)),
			"--election-timeout", strconv.Itoa(int(ElectionTimeout / time.Millisecond)),
			// A process crash keeps what the kernel has: the tests kill
			// processes, never the machine, and the disk is shared.
			"--unsafe-no-fsync",
			// Clients ping every 2 s (Config): the server must not take
			// that for abuse (its default floor is 5 s, above which it
			// closes the connection with too_many_pings).
			"--grpc-keepalive-min-time", "1s",
			"--log-level", "warn",
		}
		if m.proc, err = serverproc.Start(dir, nil, watchdog, "etcdtest-watchdog", args...); err != nil {
			c.Close()
			return nil, fmt.Errorf("etcdtest: %w", err)
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.ClientURL
	}
	return eps
}

// Config is a client configuration for endpoints (all members' if none),
// quiet and with short dial and keepalive bounds, so that a client notices
// a dead member soon.
func Config(endpoints ...string) clientv3.Config {
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	}
}

// Client returns a client of endpoints (all members' if none), closed
// when the test ends.
func (c *Cluster) Client(tb testing.TB, endpoints ...string) *clientv3.Client {
	tb.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	cl, err := clientv3.New(Config(endpoints...))
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// WaitHealthy waits until every running member reports itself healthy
// (it has a leader and serves reads).
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	for _, m := range c.Members {
		if m.PID() == 0 {
			continue
		}
		if err := m.waitHealthy(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Leader waits until the running members agree on a leader among them,
// and returns it.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last error
	for {
		leader, err := c.leaderOnce(ctx)
		if err == nil {
			return leader, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcdtest: no leader agreed: %w", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) leaderOnce(ctx context.Context) (*Member, error) {
	var leaderID uint64
	byID := map[uint64]*Member{}
	for _, m := range c.Members {
		if m.PID() == 0 {
			continue
		}
		id, leader, err := m.Status(ctx)
		if err != nil {
			return nil, err
		}
		byID[id] = m
		switch {
		case leader == 0:
			return nil, fmt.Errorf("%s has no leader", m.Name)
		case leaderID == 0:
			leaderID = leader
		case leader != leaderID:
			return nil, fmt.Errorf("members disagree on the leader (%x, %x)", leaderID, leader)
		}
	}
	if m, ok := byID[leaderID]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("leader %x is not a running member", leaderID)
}

// Others are the members other than m.
func (c *Cluster) Others(m *Member) []*Member {
	var out []*Member
	for _, o := range c.Members {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

// KillAll kills every member (SIGKILL).
func (c *Cluster) KillAll() error {
	var errs []error
	for _, m := range c.Members {
		errs = append(errs, m.Kill())
	}
	return errors.Join(errs...)
}

// StartAll starts every stopped member again with its data and waits
// until all serve.
func (c *Cluster) StartAll(ctx context.Context) error {
	for _, m := range c.Members {
		if _, err := m.proc.Resume("start"); err != nil {
			return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
		}
	}
	return c.WaitHealthy(ctx)
}

// Close kills every member and removes their directories.
func (c *Cluster) Close() error {
	var errs []error
	for _, m := range c.Members {
		if m.proc != nil {
			m.mu.Lock()
			if m.status != nil {
				m.status.Close()
				m.status = nil
			}
			m.mu.Unlock()
			errs = append(errs, m.proc.Close())
		}
	}
	return errors.Join(errs...)
}

// PID is the member's process id, 0 while it is stopped.
func (m *Member) PID() int { return m.proc.PID() }

// Dir is the member's directory (its data is in Dir/data, its log in
// Dir/etcd.log).
func (m *Member) Dir() string { return m.dir }

// Kill ends the member with SIGKILL (continuing it first if paused) and
// waits until it has exited. Its data stays for Start.
func (m *Member) Kill() error {
	if err := m.proc.Halt("kill", "done"); err != nil {
		return fmt.Errorf("etcdtest: kill %s: %w", m.Name, err)
	}
	return nil
}

// Start starts a killed member again with its data and waits until it
// serves, which needs a quorum of members running.
func (m *Member) Start(ctx context.Context) error {
	if _, err := m.proc.Resume("start"); err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
	}
	return m.waitHealthy(ctx)
}

// Restart kills the member and starts it again.
func (m *Member) Restart(ctx context.Context) error {
	if err := m.Kill(); err != nil {
		return err
	}
	return m.Start(ctx)
}

// Pause stops the member with SIGSTOP: its connections stay open and
// nothing is answered until Resume.
func (m *Member) Pause() error { return m.signal(syscall.SIGSTOP) }

// Resume continues a paused member with SIGCONT.
func (m *Member) Resume() error { return m.signal(syscall.SIGCONT) }

func (m *Member) signal(sig syscall.Signal) error {
	if err := m.proc.Signal(sig); err != nil {
		return fmt.Errorf("etcdtest: %s: %w", m.Name, err)
	}
	return nil
}

// Status asks the member for its id and the leader it follows (0: none).
func (m *Member) Status(ctx context.Context) (id, leader uint64, err error) {
	m.mu.Lock()
	if m.status == nil {
		m.status, err = clientv3.New(Config(m.ClientURL))
	}
	cl := m.status
	m.mu.Unlock()
	if err != nil {
		return 0, 0, err
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cl.Status(sctx, m.ClientURL)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: status: %w", m.Name, err)
	}
	return resp.Header.MemberId, resp.Leader, nil
}

// waitHealthy waits until the member's /health says true.
func (m *Member) waitHealthy(ctx context.Context) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	err := serverproc.WaitReady(ctx, readyTimeout, 20*time.Millisecond, m.PID(), func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.ClientURL+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), `"health":"true"`) {
			return fmt.Errorf("not healthy: %s", body)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("etcdtest: %s %w; log: %s", m.Name, err, serverproc.LogTail(filepath.Join(m.dir, "etcd.log")))
	}
	return nil
}
