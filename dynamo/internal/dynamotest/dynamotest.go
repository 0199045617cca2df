// Package dynamotest runs throwaway dynalite servers — a DynamoDB API
// server on LevelDB, run by Node — for the tests of package dynamo.
//
// The first use installs dynalite with npm ("npm ci" of the package.json
// and package-lock.json embedded here, scripts off) into a cache directory
// ($SQLOCK_DYNALITE_CACHE, else the user's cache directory under
// sqlock/dynalite-<hash of the lock file>), under a file lock, so that test
// binaries running at once install it once. It needs node (≥ 20) and npm on
// PATH and npm's registry reachable; nothing is installed by hand, and
// there is no silent skip.
//
// [Start] runs a server on a free 127.0.0.1 port (picked by the server
// itself) in a temporary directory, through serve.js: dynalite with one
// crash of its own turned off (see npm/serve.js). The data stays in
// memory unless [Options.Persist] puts it in LevelDB in that directory, so
// that it survives [Server.Kill] and [Server.Restart]. [Shared] is one
// server per test binary.
//
// Each server is owned by a watchdog (package serverproc): when the test
// binary's end of its pipe closes — Close, normal exit, a panic, a go test
// timeout, SIGKILL — the server is killed and the directory removed.
//
// Fault levers, serverproc's [serverproc.Server]: Kill (SIGKILL), Start
// (again, on the same port and directory), Restart, Pause (SIGSTOP) and
// Resume (SIGCONT).
package dynamotest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

//go:embed npm/package.json npm/package-lock.json npm/serve.js
var npmFiles embed.FS

// Options tune a server started by Start.
type Options struct {
	// Persist keeps the data in LevelDB in the server's directory, so that
	// it survives Kill and Restart. Without it the data is in memory.
	Persist bool
}

// Server is a dynalite server owned by this process. Its fault levers
// (Kill, Start, Restart, Pause, Resume) and Close are serverproc's.
type Server struct {
	*serverproc.Server // the process, its address, its levers
	// Endpoint is the server's URL, http://127.0.0.1:port.
	Endpoint string
}

// watchdog starts the server, obeys "kill"/"start" lines on stdin, and on
// EOF kills the server and removes the directory. The first start listens
// on a port the server picks (0) and writes it to the port file; a start
// after a kill listens on the port the file holds, so that clients need
// not change.
var watchdog = serverproc.Script(`node="$1"; dir="$2"; NODE_PATH="$3"; data="$4"; export NODE_PATH
start() {
  port=0; if [ -s "$dir/port" ]; then port=$(cat "$dir/port"); fi
  "$node" "$dir/serve.js" "$port" "$data" "$dir/port" >>"$dir/dynalite.log" 2>&1 & pid=$!; echo "$pid"
}
start
while read -r cmd; do
  case "$cmd" in
    kill) kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; wait "$pid"; pid=; echo done ;;
    start) start ;;
  esac
done
if [ -n "$pid" ]; then halt KILL 0; fi
rm -rf "$dir"
`)

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared returns the test binary's one server (in memory), started on first
// use and stopped when the binary exits. Tests that share it use tables of
// their own ([Table]).
func Shared(tb testing.TB) *Server {
	tb.Helper()
	sharedOnce.Do(func() { shared, sharedErr = Start(context.Background(), Options{}) })
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

// New starts a server of tb's own, closed when the test ends.
func New(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := Start(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Start starts a server. Close stops it and removes its directory; if the
// process dies first, the watchdog does the same — and so does the garbage
// collector if the Server becomes unreachable (its pipe is closed): keep it
// referenced while it is used.
func Start(ctx context.Context, opts Options) (*Server, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("dynamotest: no node on PATH (Debian: apt-get install -y nodejs npm)")
	}
	modules, err := Install(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := serverproc.TempDir("sqlock-dynalite-", nil)
	if err != nil {
		return nil, err
	}
	data := ""
	if opts.Persist {
		data = filepath.Join(dir, "data")
	}
	js, _ := npmFiles.ReadFile("npm/serve.js")
	if err := os.WriteFile(filepath.Join(dir, "serve.js"), js, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	proc, err := serverproc.Start(dir, nil, watchdog, "dynamotest-watchdog",
		node, dir, filepath.Join(modules, "node_modules"), data)
	if err != nil {
		return nil, fmt.Errorf("dynamotest: %w", err)
	}
	s := &Server{}
	s.Server = serverproc.NewServer("dynamotest", proc, dir, s.waitReady)
	port, err := s.waitPort(ctx, filepath.Join(dir, "port"))
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Addr = net.JoinHostPort("127.0.0.1", port)
	s.Endpoint = "http://" + s.Addr
	if err := s.waitReady(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// waitPort waits for the port file the first start writes.
func (s *Server) waitPort(ctx context.Context, portFile string) (string, error) {
	var port string
	err := serverproc.WaitReady(ctx, 60*time.Second, 20*time.Millisecond, s.PID(), func(context.Context) error {
		b, err := os.ReadFile(portFile)
		if err != nil {
			return err
		}
		port = strings.TrimSpace(string(b))
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("dynamotest: dynalite %w; log: %s", err, s.logTail())
	}
	return port, nil
}

// waitReady waits until the server answers its health check.
func (s *Server) waitReady(ctx context.Context) error {
	err := serverproc.WaitReady(ctx, 60*time.Second, 20*time.Millisecond, s.PID(), func(ctx context.Context) error {
		return health(ctx, s.Endpoint)
	})
	if err != nil {
		return fmt.Errorf("dynamotest: dynalite %w; log: %s", err, s.logTail())
	}
	return nil
}

func (s *Server) logTail() string { return serverproc.LogTail(filepath.Join(s.Dir(), "dynalite.log")) }

// health is dynalite's GET /, on a connection of its own.
func health(ctx context.Context, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return err
	}
	c := http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health check answered %s", resp.Status)
	}
	return nil
}

// Client returns an SDK client of the server: its endpoint, static
// credentials, region us-east-1. configure, when not nil, may change the
// options first (a retryer, an API option that counts requests).
func (s *Server) Client(configure func(*dynamodb.Options)) *dynamodb.Client {
	o := ClientOptions(s.Endpoint)
	if configure != nil {
		configure(&o)
	}
	return dynamodb.New(o)
}

// ClientOptions are the options of a client of the server at endpoint, for
// a process that has the endpoint only (a child of a test).
func ClientOptions(endpoint string) dynamodb.Options {
	return dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "dynamotest", SecretAccessKey: "dynamotest", Source: "dynamotest"}, nil
		}),
	}
}

// WaitActive waits until the table is ACTIVE: dynalite, like DynamoDB,
// creates a table asynchronously, and refuses its items until then.
func WaitActive(ctx context.Context, c *dynamodb.Client, table string) error {
	w := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 5*time.Millisecond, 100*time.Millisecond
	})
	return w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Minute)
}

var tableSeq atomic.Int64

// Table returns a table name no other test of this binary uses: tb's name,
// cut to what DynamoDB allows, and a sequence number.
func Table(tb testing.TB) string {
	tb.Helper()
	var b strings.Builder
	for _, r := range tb.Name() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 200 {
		name = name[:200]
	}
	return name + "-" + strconv.FormatInt(tableSeq.Add(1), 10)
}

// Install makes sure dynalite is installed in the cache and returns the
// directory holding its node_modules.
func Install(ctx context.Context) (string, error) {
	lock, _ := npmFiles.ReadFile("npm/package-lock.json")
	sum := sha256.Sum256(lock)
	root := os.Getenv("SQLOCK_DYNALITE_CACHE")
	if root == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		root = filepath.Join(base, "sqlock")
	}
	dir := filepath.Join(root, "dynalite-"+hex.EncodeToString(sum[:6]))
	if installed(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("dynamotest: cache: %w", err)
	}
	// One installer at a time: test binaries of several packages start at
	// once.
	f, err := os.OpenFile(filepath.Join(root, "install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("dynamotest: cache: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("dynamotest: cache lock: %w", err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if installed(dir) {
		return dir, nil
	}
	return dir, install(ctx, root, dir)
}

// installed reports whether dir holds a complete installation: the last
// step of install is the rename that creates dir.
func installed(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "node_modules", "dynalite", "package.json"))
	return err == nil
}

// install runs npm ci in a directory of its own, renamed to dir when done.
func install(ctx context.Context, root, dir string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return errors.New("dynamotest: no npm on PATH (Debian: apt-get install -y nodejs npm)")
	}
	tmp, err := os.MkdirTemp(root, "installing-")
	if err != nil {
		return fmt.Errorf("dynamotest: cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, _ := npmFiles.ReadFile("npm/" + name)
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return fmt.Errorf("dynamotest: cache: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// --ignore-scripts: dynalite's LevelDB binding ships prebuilt binaries,
	// so nothing needs compiling.
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("dynamotest: npm ci dynalite in %s: %w\n%s", tmp, err, out.String())
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("dynamotest: cache: %w", err)
	}
	return nil
}
