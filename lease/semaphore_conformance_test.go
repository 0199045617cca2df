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

// TestSemaphoreConformanceLease runs the semaphore suite on lease's
// semaphores; the witness is the semaphores' own database. The backend's
// fault expires the slot on the server, its holder unaware.
func TestSemaphoreConformanceLease(t *testing.T) {
	locktest.RunSemaphore(t, leaseSemaphores("lease", func(_ *testing.T, db *pgtest.DB) string { return db.DSN }))
}

// TestSemaphoreConformanceLeasePgBouncer runs it through PgBouncer in
// transaction mode, where waiters poll instead of listening.
func TestSemaphoreConformanceLeasePgBouncer(t *testing.T) {
	locktest.RunSemaphore(t, leaseSemaphores("lease-pgbouncer", func(t *testing.T, db *pgtest.DB) string {
		return pgtest.StartPgBouncer(t, db, "transaction") + "&default_query_exec_mode=exec"
	}))
}

// leaseSemaphores declares lease's semaphores to the suite; dsn reaches
// the database that Start makes, and the witness is that database,
// reached directly.
func leaseSemaphores(name string, dsn func(t *testing.T, db *pgtest.DB) string) locktest.SemaphoreBackend {
	var direct string
	return locktest.SemaphoreBackend{
		Name:     name,
		MinTTL:   lease.MinTTL,
		NotHeld:  lease.ErrNotHeld,
		BadNames: []string{strings.Repeat("n", 256), "\xff\xfe", "a\x00b"},
		Start: func(t *testing.T) string {
			db := pgtest.New(t)
			if err := lease.MigrateSemaphores(context.Background(), db.Pool()); err != nil {
				t.Fatal(err)
			}
			direct = db.DSN
			return dsn(t, db)
		},
		Witness: func(*testing.T, string) string { return direct },
		Open: func(t testing.TB, dsn string) locktest.SemaphoreHarness {
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			pool := conformancePool(t, cfg)
			sem := func(pool *pgxpool.Pool, n int, o locktest.Options) sqlock.SemaphoreAcquirer {
				return lease.New(pool, lease.WithTimeout(o.Timeout), lease.WithObserver(o.Observer)).Semaphore(n, o.TTL)
			}
			return locktest.SemaphoreHarness{
				New: func(n int, o locktest.Options) sqlock.SemaphoreAcquirer { return sem(pool, n, o) },
				Unreachable: func(n int, o locktest.Options) sqlock.SemaphoreAcquirer {
					dead := cfg.Copy()
					host, port, _ := net.SplitHostPort(locktest.ClosedAddr(t))
					p, _ := strconv.Atoi(port)
					dead.ConnConfig.Host, dead.ConnConfig.Port, dead.ConnConfig.Fallbacks = host, uint16(p), nil
					return sem(conformancePool(t, dead), n, o)
				},
				Lose: func(ctx context.Context, name string, sl sqlock.Slot) error {
					tag, err := pool.Exec(ctx, `UPDATE sqlock_leases_slots SET expires[$2::int] = clock_timestamp() - interval '1 second'
						WHERE name = $1 AND tokens[$2::int] = $3`, name, sl.Index()+1, sl.Token())
					if err == nil && tag.RowsAffected() != 1 {
						err = errors.New("the slot is not the holder's")
					}
					return err
				},
			}
		},
	}
}
