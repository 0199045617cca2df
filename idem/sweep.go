package idem

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errs"
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
	q := fmt.Sprintf(`DELETE FROM %[1]s t USING (
  SELECT scope, key FROM %[1]s WHERE expires_at <= clock_timestamp()
  LIMIT %[2]d FOR UPDATE SKIP LOCKED
) d WHERE t.scope = d.scope AND t.key = d.key`, c.table, c.batch)
	var exec func() (int64, error)
	switch h := any(db).(type) {
	case *sql.DB:
		if h != nil {
			exec = func() (int64, error) {
				r, err := h.ExecContext(ctx, q)
				if err != nil {
					return 0, err
				}
				return r.RowsAffected()
			}
		}
	case *pgxpool.Pool:
		if h != nil {
			exec = func() (int64, error) {
				t, err := h.Exec(ctx, q)
				return t.RowsAffected(), err
			}
		}
	}
	if exec == nil {
		return 0, errs.New(sqlock.ErrNilHandle, "idem: nil database handle")
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
