package etcdlock_test

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/etcdlock"
	"github.com/sqlock/sqlock/etcdlock/internal/etcdtest"
	"github.com/sqlock/sqlock/internal/testing/locktest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// TestElectionConformanceEtcd runs the election suite on a three-member
// cluster of its own: the target is the members' client URLs; the
// partition is a stalled TCP proxy in front of one member, the only one
// the cut-off candidate's client knows; the register is in a PostgreSQL
// database of its own.
func TestElectionConformanceEtcd(t *testing.T) {
	locktest.RunElection(t, locktest.ElectionBackend{
		Name:     "etcdlock",
		BadNames: []string{strings.Repeat("n", etcdlock.MaxNameLen+1)},
		Start: func(t *testing.T) string {
			return strings.Join(etcdtest.New(t, 3).Endpoints(), ",")
		},
		Proxy: func(t *testing.T, target string) (string, func(), func()) {
			first, _, _ := strings.Cut(target, ",")
			p := pgtest.StartTCPProxy(t, strings.TrimPrefix(first, "http://"))
			return "http://" + p.Addr(), p.Stall, p.Resume
		},
		Register: func(t *testing.T, _ string) string { return pgtest.New(t).DSN },
		Open: func(t testing.TB, target string) locktest.ElectionHarness {
			client := func(endpoints ...string) *clientv3.Client {
				cl, err := clientv3.New(etcdtest.Config(endpoints...))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cl.Close() })
				return cl
			}
			cl := client(strings.Split(target, ",")...)
			candidate := func(cl *clientv3.Client, o locktest.Candidate) sqlock.Election {
				return etcdlock.New(cl, etcdlock.WithTimeout(o.Timeout)).Candidate(o.Name, o.Identity, o.TTL).Election()
			}
			return locktest.ElectionHarness{
				New: func(o locktest.Candidate) sqlock.Election { return candidate(cl, o) },
				Unreachable: func(o locktest.Candidate) sqlock.Election {
					return candidate(client("http://"+locktest.ClosedAddr(t)), o)
				},
			}
		},
	})
}
