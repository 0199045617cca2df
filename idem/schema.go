package idem

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/pgident"
	"github.com/sqlock/sqlock/internal/txbatch"
)

// Handle is a database pool: database/sql (pgx's stdlib driver, lib/pq) or
// pgx's.
type Handle interface {
	*sql.DB | *pgxpool.Pool
}

// tableName is a validated, possibly schema-qualified table name.
type tableName = pgident.Table

// parseTable reads a keys table's name. The index is named
// <table>_expires_at: the table leaves room for it.
func parseTable(s string) (tableName, error) {
	return pgident.ParseTable("idem: WithTable", s, pgident.MaxLen-len("_expires_at"))
}

// MaxKeyBytes is the longest key and the longest scope, in bytes.
const MaxKeyBytes = 255

// DDL returns the statement that creates the keys table (named by
// [WithTable], if given) and its expiry index, for migration tools. It is
// idempotent (IF NOT EXISTS).
func DDL(opts ...Option) (string, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return "", err
	}
	return ddl(c.table), nil
}

// ddl is the keys table. Key and scope lengths ([MaxKeyBytes]) are
// checked by the package before any statement is sent (ErrInvalidKey), not
// by CHECK constraints: the server rebuilds a table's CHECK expressions from
// their stored text for every INSERT and UPDATE, 7% of the backend's CPU
// in a first execution (docs/idem.md, "Measured"). Tables made by earlier
// versions keep theirs: Migrate does not alter an existing table.
func ddl(t tableName) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    scope       text        NOT NULL,
    key         text        NOT NULL,
    fingerprint bytea       NOT NULL,
    result      bytea,
    phases      bytea,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (expires_at);
`, t, pgident.Quote(t.Name+"_expires_at"))
}

// migrateLock serialises concurrent Migrate calls (CREATE … IF NOT EXISTS
// is not safe against itself): "sqlockI1".
const migrateLock = 0x73716c6f636b4931

// Migrate creates the keys table and its index if they do not exist (the
// statement of [DDL]), in one transaction. Concurrent calls are safe. opts
// may name the table ([WithTable]).
func Migrate[DB Handle](ctx context.Context, db DB, opts ...Option) error {
	c, err := buildConfig(opts)
	if err != nil {
		return err
	}
	q := fmt.Sprintf("SELECT pg_catalog.pg_advisory_xact_lock(%d);\n", int64(migrateLock)) + ddl(c.table)
	switch h := any(db).(type) {
	case *sql.DB:
		if h != nil {
			_, err = h.ExecContext(ctx, q)
			return wrapDB("migrate", err)
		}
	case *pgxpool.Pool:
		if h != nil {
			_, err = h.Exec(ctx, q)
			return wrapDB("migrate", err)
		}
	}
	return errkind.New(sqlock.ErrNilHandle, "idem: nil database handle")
}

// wrapDB says which step a database error came from, and names the cure
// of a pooler's prepared-statement failure (pgerr.PoolerPrepared).
func wrapDB(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("idem: %s: %w", op, pgerror.PoolerPrepared(err))
}

// statements are the statements of one table.
type statements struct {
	claim, claimTry, claimAhead, claimTryAhead, read, drop, unclaim, store string
	phaseOpen, phaseRecord                                                 string
}

// defaultStatements are those of DefaultTable, built once: most calls use
// it, and building them is a dozen Sprintf of long strings per call. (A
// value computed at init and never written again: no mutable state.)
var defaultStatements = makeStatements(tableName{Name: DefaultTable})

// buildStatements returns the statements of table t.
func buildStatements(t tableName) statements {
	if t == (tableName{Name: DefaultTable}) {
		return defaultStatements
	}
	return makeStatements(t)
}

func makeStatements(t tableName) statements {
	// claim inserts the key, or — when a committed row is already visible
	// to the statement's snapshot — returns it, in one round trip. A row
	// still being written by another transaction makes the INSERT wait for
	// that transaction (the unique index queues it); if it commits, the
	// INSERT does nothing and the row, committed after this statement's
	// snapshot, is read by the read statement that follows. claimTry, when
	// no committed row is visible, first tries a transaction advisory lock
	// on the key, which every middleware request that executes holds while
	// its handler runs: if another holds it, nothing is inserted and the
	// request is answered 409 without waiting. A replay of a committed row
	// takes no lock, so concurrent replays never see each other as busy.
	//
	// c is the key's row as the snapshot has it, or a row of NULLs, joined
	// with the lock's outcome: one row, computed once (a CTE with a volatile
	// function is materialised), that the INSERT and the answer both read.
	// Each sub-select is a plan node the server builds and runs for every
	// execution: this form, one scan of c for the whole answer instead of
	// a sub-select per column, cost the backend 25 µs less per claim
	// (docs/idem.md, "Measured").
	const tmpl = `WITH c AS (
  SELECT cur.key IS NOT NULL AS found, cur.fingerprint, cur.result, cur.expires_at <= clock_timestamp() AS expired,
    cur.phases IS NOT NULL AS phased, %[2]s AS got
  FROM (SELECT) AS one LEFT JOIN %[1]s AS cur ON cur.scope = $1 AND cur.key = $2
), ins AS (
  INSERT INTO %[1]s (scope, key, fingerprint, expires_at)
  SELECT $1, $2, $3, clock_timestamp() + $4::bigint * interval '1 microsecond' FROM c WHERE c.got
  ON CONFLICT (scope, key) DO NOTHING
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ins), got, found, coalesce(fingerprint, ''), coalesce(result, ''),
  result IS NULL, coalesce(expired, false), phased%[3]s
FROM c`
	// answered, a last column of the claim sent ahead of BEGIN (see
	// claimAheadQueue), says that the key is recorded and not expired, and
	// then stops BEGIN (txbatch.StopBegin): the replay is answered in one
	// round trip, with no transaction begun. (An error of the statement
	// itself would discard its row: it writes, so it sends its row only
	// once it has completed.)
	const answered = `,
  CASE WHEN result IS NOT NULL AND NOT expired THEN ` + txbatch.StopBegin + ` IS NOT NULL ELSE false END`
	const tryLock = "CASE WHEN cur.key IS NOT NULL THEN true ELSE pg_catalog.pg_try_advisory_xact_lock($5::bigint) END"
	return statements{
		claim:         fmt.Sprintf(tmpl, t, "true", ""),
		claimTry:      fmt.Sprintf(tmpl, t, tryLock, ""),
		claimAhead:    fmt.Sprintf(tmpl, t, "true", answered),
		claimTryAhead: fmt.Sprintf(tmpl, t, tryLock, answered),
		read: fmt.Sprintf(`SELECT false, true, true, fingerprint, coalesce(result, ''), result IS NULL, expires_at <= clock_timestamp(),
  phases IS NOT NULL
FROM %s WHERE scope = $1 AND key = $2`, t),
		drop:    fmt.Sprintf(`DELETE FROM %s WHERE scope = $1 AND key = $2 AND expires_at <= clock_timestamp()`, t),
		unclaim: fmt.Sprintf(`DELETE FROM %s WHERE scope = $1 AND key = $2`, t),
		store:   fmt.Sprintf(`UPDATE %s SET result = $3 WHERE scope = $1 AND key = $2`, t),
		// phaseOpen creates a phased key's row, or starts an expired one
		// over, and returns it; the caller holds the key's lease, so nobody
		// else writes the row meanwhile (the row is updated even when it
		// stays the same, so that RETURNING always has it).
		phaseOpen: fmt.Sprintf(`INSERT INTO %s AS t (scope, key, fingerprint, phases, expires_at)
VALUES ($1, $2, $3, '', clock_timestamp() + $4::bigint * interval '1 microsecond')
ON CONFLICT (scope, key) DO UPDATE SET
  fingerprint = CASE WHEN t.expires_at <= clock_timestamp() THEN excluded.fingerprint ELSE t.fingerprint END,
  result      = CASE WHEN t.expires_at <= clock_timestamp() THEN NULL ELSE t.result END,
  phases      = CASE WHEN t.expires_at <= clock_timestamp() THEN ''::bytea ELSE t.phases END,
  expires_at  = CASE WHEN t.expires_at <= clock_timestamp() THEN excluded.expires_at ELSE t.expires_at END
RETURNING fingerprint, coalesce(result, ''), result IS NULL, phases IS NULL, coalesce(phases, '')`, t),
		phaseRecord: fmt.Sprintf(`UPDATE %s SET phases = $3, result = $4,
  expires_at = clock_timestamp() + $5::bigint * interval '1 microsecond' WHERE scope = $1 AND key = $2`, t),
	}
}
