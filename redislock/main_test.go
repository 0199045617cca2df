package redislock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sqlock/sqlock/internal/testing/leakcheck"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// childEnv makes the test binary a worker process (see child_test.go)
// instead of running tests.
const childEnv = "REDISLOCK_TEST_CHILD"

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // the fault tests make go-redis log every refused dial
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	// The examples connect to REDIS_ADDR and REDLOCK_ADDRS, as a program
	// would. The servers are gone with the test binary (their watchdogs
	// see the pipe close).
	if os.Getenv("REDIS_ADDR") == "" {
		var addrs []string
		for range 3 {
			s, err := redistest.Start(context.Background(), redistest.Options{})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			addrs = append(addrs, s.Addr)
			exampleServers = append(exampleServers, s)
		}
		os.Setenv("REDIS_ADDR", addrs[0])
		os.Setenv("REDLOCK_ADDRS", strings.Join(addrs, ","))
	}
	pgtest.Main(m)
}

// exampleServers keeps the examples' servers reachable: a Server that is
// garbage collected closes its watchdog's pipe, which stops it.
var exampleServers []*redistest.Server

// leakCheck must be called first in a test (see leakcheck.Check). go-redis
// probes a dead server from a goroutine of its own, once a second until the
// server answers or the client is closed: not ours, and gone within a
// second of the client's Close.
func leakCheck(t *testing.T) {
	t.Helper()
	leakcheck.Check(t, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// counter counts the commands a client sends (each one round trip: the
// package sends no pipelines).
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// clients returns a client of each server configured as NewRedlock's doc
// recommends: a paused server costs a command no more than its context
// allows, a dead one fails at once.
func clients(t testing.TB, servers []*redistest.Server) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		cs[i] = s.Client(t, func(o *redis.Options) {
			o.ContextTimeoutEnabled = true
			o.DialerRetries = 1
			o.MaxRetries = -1
		})
	}
	return cs
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
