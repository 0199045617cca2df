package idem

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

// Sweep deletes the keys whose retention ([WithRetention]) has run out, in
// batches of at most [WithBatch] keys (default [MaxSweepBatch]), each batch
// one short statement of its own that skips rows locked by others, until a
// batch finds fewer than its size. It returns how many keys it deleted.
// Run it periodically (a ticker in one replica, or cron); concurrent
// sweepers skip each other's rows. A key in progress is never swept: its
// row is not committed yet.
func Sweep[DB Handle](ctx context.Context, db DB, opts ...Option) (int64, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return 0, err
	}
	// One statement per batch: the oldest expired rows, found through the
	// expires_at index (statement_timestamp() is stable, so the index can
	// be used), locked skipping rows others hold, deleted by their tuple
	// ids. It also reports how long it ran on the server: the rows it
	// deleted stay locked from then until its commit, right after.
	q := fmt.Sprintf(`WITH d AS (
  DELETE FROM %[1]s WHERE ctid = ANY (ARRAY (
    SELECT ctid FROM %[1]s WHERE expires_at <= statement_timestamp()
    ORDER BY expires_at LIMIT %[2]d FOR UPDATE SKIP LOCKED))
  RETURNING 1
)
SELECT count(*), (extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000000)::bigint FROM d`, c.table, c.batch)
	var exec func() (int64, error)
	batch := func(scan func(dest ...any) error) (int64, error) {
		var n, micros int64
		err := scan(&n, &micros)
		if err == nil && c.onBatch != nil {
			c.onBatch(n, time.Duration(micros)*time.Microsecond)
		}
		return n, err
	}
	switch h := any(db).(type) {
	case *sql.DB:
		if h != nil {
			exec = func() (int64, error) { return batch(h.QueryRowContext(ctx, q).Scan) }
		}
	case *pgxpool.Pool:
		if h != nil {
			exec = func() (int64, error) { return batch(h.QueryRow(ctx, q).Scan) }
		}
	}
	if exec == nil {
		return 0, errkind.New(sqlock.ErrNilHandle, "idem: nil database handle")
	}
	var total int64
	for {
		n, err := exec()
		total += n
		if err != nil {
			return total, wrapDB("sweep", err)
		}
		if n < int64(c.batch) {
			return total, nil
		}
	}
}
