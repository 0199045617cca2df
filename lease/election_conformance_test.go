package lease_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/locktest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// TestElectionConformanceLease runs the election suite on candidates
// whose leadership is a lease: the target is the database's DSN, which
// also keeps the suite's register; the partition is a stalled TCP proxy
// in front of the server.
func TestElectionConformanceLease(t *testing.T) {
	locktest.RunElection(t, locktest.ElectionBackend{
		Name:     "lease",
		BadNames: []string{strings.Repeat("n", 256), "\xff\xfe", "a\x00b"},
		Start: func(t *testing.T) string {
			db := pgtest.New(t)
			if err := lease.MigrateElections(context.Background(), db.Pool()); err != nil {
				t.Fatal(err)
			}
			return db.DSN
		},
		Proxy: func(t *testing.T, dsn string) (string, func(), func()) {
			p := pgtest.StartProxy(t, dsn)
			return p.DSN, p.Stall, p.Resume
		},
		Register: func(t *testing.T, dsn string) string { return dsn },
		Open: func(t testing.TB, dsn string) locktest.ElectionHarness {
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			pool := conformancePool(t, cfg)
			candidate := func(pool *pgxpool.Pool, o locktest.Candidate) sqlock.Election {
				return lease.New(pool, lease.WithTimeout(o.Timeout)).Candidate(o.Name, o.Identity, o.TTL).Election()
			}
			return locktest.ElectionHarness{
				New: func(o locktest.Candidate) sqlock.Election { return candidate(pool, o) },
				Unreachable: func(o locktest.Candidate) sqlock.Election {
					dead := cfg.Copy()
					host, port, _ := net.SplitHostPort(locktest.ClosedAddr(t))
					p, _ := strconv.Atoi(port)
					dead.ConnConfig.Host, dead.ConnConfig.Port, dead.ConnConfig.Fallbacks = host, uint16(p), nil
					return candidate(conformancePool(t, dead), o)
				},
			}
		},
	})
}
