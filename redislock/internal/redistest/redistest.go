// Package redistest is the root module's redis-server rig
// ([github.com/sqlock/sqlock/internal/testing/redistest]) with go-redis
// clients added. The rig itself speaks the protocol by hand, so that only
// this module, package redislock's, depends on a Redis client; tests here
// import this package instead and find the rig's whole API on [Server].
package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	rig "github.com/sqlock/sqlock/internal/testing/redistest"
)

// Options tune a server; see the rig's Options.
type Options = rig.Options

// ErrNoRedis is returned when no redis-server binary is found.
var ErrNoRedis = rig.ErrNoRedis

// Server is a redis-server owned by this process, with client helpers.
type Server struct{ *rig.Server }

// New starts a server for tb, closed when the test ends.
func New(tb testing.TB, opts Options) *Server {
	tb.Helper()
	return &Server{rig.New(tb, opts)}
}

// NewN starts n servers for tb (for Redlock), closed when the test ends.
func NewN(tb testing.TB, n int, opts Options) []*Server {
	tb.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = New(tb, opts)
	}
	return servers
}

// Start starts a server; the caller closes it.
func Start(ctx context.Context, opts Options) (*Server, error) {
	s, err := rig.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Server{s}, nil
}

// Client returns a go-redis client for the server, closed when the test
// ends. configure, when not nil, may change the options first.
func (s *Server) Client(tb testing.TB, configure func(*redis.Options)) *redis.Client {
	tb.Helper()
	o := &redis.Options{Addr: s.Addr}
	if configure != nil {
		configure(o)
	}
	c := redis.NewClient(o)
	tb.Cleanup(func() { c.Close() })
	return c
}

// ClusterClient returns a go-redis cluster client of a server started with
// Options.Cluster, closed when the test ends.
func (s *Server) ClusterClient(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.Addr}})
	tb.Cleanup(func() { c.Close() })
	return c
}
