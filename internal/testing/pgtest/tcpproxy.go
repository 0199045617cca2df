package pgtest

import "testing"

// StartTCPProxy puts a [Proxy] in front of the TCP server at addr
// (host:port) — any server: the proxy forwards bytes and knows no protocol
// (redislock's benchmarks put it in front of redis-server). Connect to its
// Addr; its DSN is empty. It is closed when the test ends.
func StartTCPProxy(tb testing.TB, addr string) *Proxy {
	tb.Helper()
	p, err := listenProxy("tcp", addr)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}
