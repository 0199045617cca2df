package lease_test

import (
	"context"
	"errors"
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

// TestConformanceLease runs the lock backends' conformance suite on
// leases taken directly from PostgreSQL.
func TestConformanceLease(t *testing.T) {
	locktest.Run(t, leaseConformance("lease", func(t *testing.T, db *pgtest.DB) string { return db.DSN }))
}

// TestConformanceLeasePgBouncer runs it on leases taken through PgBouncer
// in transaction mode, where waiters poll instead of listening.
func TestConformanceLeasePgBouncer(t *testing.T) {
	locktest.Run(t, leaseConformance("lease-pgbouncer", func(t *testing.T, db *pgtest.DB) string {
		return pgtest.StartPgBouncer(t, db, "transaction") + "&default_query_exec_mode=exec"
	}))
}

// leaseConformance declares lease to the suite: fenced, with TTLs, lost
// when its row expires on the server (as it does after a holder paused
// past its TTL); dsn reaches the database that start is given.
func leaseConformance(name string, dsn func(t *testing.T, db *pgtest.DB) string) locktest.Backend {
	return locktest.Backend{
		Name:    name,
		Caps:    locktest.Caps{Fenced: true, TTL: true},
		MinTTL:  lease.MinTTL,
		NotHeld: lease.ErrNotHeld,
		// Too long (the limit is 255 bytes), not UTF-8, a NUL byte.
		BadNames: []string{strings.Repeat("n", 256), "\xff\xfe", "a\x00b"},
		Start: func(t *testing.T) string {
			db := pgtest.New(t)
			if err := lease.Migrate(context.Background(), db.Pool()); err != nil {
				t.Fatal(err)
			}
			return dsn(t, db)
		},
		Open: func(t testing.TB, dsn string) locktest.Harness {
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			pool := conformancePool(t, cfg)
			manager := func(pool *pgxpool.Pool, o locktest.Options) sqlock.Acquirer {
				return lease.New(pool, lease.WithTimeout(o.Timeout), lease.WithObserver(o.Observer)).Acquirer(o.TTL)
			}
			return locktest.Harness{
				New: func(o locktest.Options) sqlock.Acquirer { return manager(pool, o) },
				Unreachable: func(o locktest.Options) sqlock.Acquirer {
					dead := cfg.Copy()
					host, port, _ := net.SplitHostPort(locktest.ClosedAddr(t))
					p, _ := strconv.Atoi(port)
					dead.ConnConfig.Host, dead.ConnConfig.Port, dead.ConnConfig.Fallbacks = host, uint16(p), nil
					return manager(conformancePool(t, dead), o)
				},
				Lose: func(ctx context.Context, name string, lk sqlock.Lock) error {
					// The lease expires on the server, its holder unaware:
					// its next renewal is refused.
					tag, err := pool.Exec(ctx, `UPDATE sqlock_leases SET expires_at = clock_timestamp() - interval '1 second'
						WHERE name = $1 AND token = $2`, name, lk.(sqlock.Fenced).Token())
					if err == nil && tag.RowsAffected() != 1 {
						err = errors.New("the lease's row is not the holder's")
					}
					return err
				},
			}
		},
	}
}

func conformancePool(t testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
