package advisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/locktest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// TestConformanceAdvisory runs the lock backends' conformance suite on
// advisory locks, each held on a pinned connection of its own.
func TestConformanceAdvisory(t *testing.T) {
	locktest.Run(t, advisoryConformance("advisory"))
}

// TestConformanceAdvisoryMultiplexed runs it on advisory locks sharing a
// few connections (WithMultiplexing).
func TestConformanceAdvisoryMultiplexed(t *testing.T) {
	locktest.Run(t, advisoryConformance("advisory-multiplexed", advisory.WithMultiplexing(4)))
}

// advisoryConformance declares advisory to the suite: no fencing token
// (an advisory lock is not a sqlock.Fenced), no TTL (a lock lasts as long
// as its session), lost when its connection's backend is terminated.
func advisoryConformance(name string, opts ...advisory.Option) locktest.Backend {
	return locktest.Backend{
		Name:    name,
		Caps:    locktest.Caps{Fenced: false, TTL: false},
		NotHeld: advisory.ErrNotHeld,
		Start:   func(t *testing.T) string { return pgtest.New(t).DSN },
		Open: func(t testing.TB, dsn string) locktest.Harness {
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			db := conformanceDB(t, cfg)
			locker := func(db *sql.DB, o locktest.Options) sqlock.Acquirer {
				// A short keepalive: the suite waits for a terminated
				// backend's locks to be reported lost.
				return advisory.New(db, append([]advisory.Option{advisory.WithTimeout(o.Timeout),
					advisory.WithKeepalive(100 * time.Millisecond), advisory.WithObserver(o.Observer)}, opts...)...).Acquirer()
			}
			return locktest.Harness{
				New: func(o locktest.Options) sqlock.Acquirer { return locker(db, o) },
				Unreachable: func(o locktest.Options) sqlock.Acquirer {
					dead := cfg.Copy()
					host, port, _ := net.SplitHostPort(locktest.ClosedAddr(t))
					p, _ := strconv.Atoi(port)
					dead.Host, dead.Port, dead.Fallbacks = host, uint16(p), nil
					return locker(conformanceDB(t, dead), o)
				},
				Lose: func(ctx context.Context, _ string, lk sqlock.Lock) error {
					return terminateHolder(ctx, db, lk.(*advisory.Lock).Key())
				},
			}
		},
	}
}

func conformanceDB(t testing.TB, cfg *pgx.ConnConfig) *sql.DB {
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

// terminateHolder ends the server backend holding key in db's database,
// as an administrator's pg_terminate_backend would, and waits until it
// has exited: its locks are free then.
func terminateHolder(ctx context.Context, db *sql.DB, key advisory.Key) error {
	classid, objid, objsubid := key.Locktag()
	var terminated bool
	err := db.QueryRowContext(ctx, `SELECT pg_terminate_backend(pid, 60000) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid = $1 AND objid = $2 AND objsubid = $3
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		int64(classid), int64(objid), objsubid).Scan(&terminated)
	switch {
	case err != nil:
		return fmt.Errorf("terminating the holder of %v: %w", key, err)
	case !terminated:
		return fmt.Errorf("the holder of %v did not exit within a minute", key)
	}
	return nil
}
