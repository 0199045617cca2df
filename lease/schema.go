package lease

import (
	"context"
	"fmt"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/pgident"
)

// tableName is a validated, possibly schema-qualified table name, read
// and quoted by the rule every package's table option follows
// (internal/pgident).
type tableName struct{ pgident.Table }

const seqSuffix = "_token_seq"

// parseTable reads WithTable's name: its sequence, table_token_seq, must
// fit in an identifier too.
func parseTable(s string) (tableName, error) {
	t, err := pgident.ParseTable("lease: WithTable", s, pgident.MaxLen-len(seqSuffix))
	return tableName{t}, err
}

func (t tableName) table() string    { return t.String() }
func (t tableName) sequence() string { return t.Ident(t.Name + seqSuffix) }

// channel is the NOTIFY channel releases are announced on: the table's
// name (a waiter woken by a same-named table in another schema just tries
// again).
func (t tableName) channel() string { return t.Name }

// maxNameBytes is the longest lease name, in bytes.
const maxNameBytes = 255

// DDL returns the statements that create the leases table and its token
// sequence (for the table WithTable names, if given), for migration tools.
// They are idempotent (IF NOT EXISTS). The sequence is deliberately not
// owned by the table: dropping and recreating the table keeps the tokens
// increasing.
func DDL(opts ...Option) (string, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return "", err
	}
	return ddl(c.table), nil
}

func ddl(t tableName) string {
	return fmt.Sprintf(`CREATE SEQUENCE IF NOT EXISTS %[2]s AS bigint NO CYCLE;
CREATE TABLE IF NOT EXISTS %[1]s (
    name        text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND %[3]d),
    owner       uuid        NOT NULL,
    token       bigint      NOT NULL UNIQUE,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
`, t.table(), t.sequence(), maxNameBytes)
}

// migrateLock serialises concurrent Migrate calls (CREATE … IF NOT EXISTS
// is not safe against itself): a transaction advisory lock on this key,
// held by the implicit transaction of the multi-statement query.
const migrateLock = 0x73716c6f636b4c31 // "sqlockL1"

// Migrate creates the leases table and its token sequence if they do not
// exist (the statements of [DDL]), in one transaction. Concurrent calls are
// safe. db is a *sql.DB or a *pgxpool.Pool; opts may name the table.
func Migrate[DB Handle](ctx context.Context, db DB, opts ...Option) error {
	c, err := buildConfig(opts)
	if err != nil {
		return &Error{Op: "migrate", Cause: err}
	}
	b := newBackend(db)
	if b == nil {
		return &Error{Op: "migrate", Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil database handle")}
	}
	q := fmt.Sprintf("SELECT pg_catalog.pg_advisory_xact_lock(%d);\n", int64(migrateLock)) + ddl(c.table)
	if err := b.exec(ctx, q); err != nil {
		return &Error{Op: "migrate", Cause: err}
	}
	return nil
}

// guardMarker is in the error the guard statement raises when the lease
// is not the holder's (the number after it is the rows found, 0).
const guardMarker = "sqlock lease lost: matching rows "

// vanishedMarker is in the error the acquire statement raises when its
// placeholder row was inserted: the row it saw was deleted before it could
// take it over (the number after it is the placeholder).
const vanishedMarker = "sqlock lease row vanished: placeholder token "

// vanishedRetries bounds how often an attempt is sent again because the row
// it saw was deleted under it: each time, a prune must delete a row that
// was created after the previous attempt's snapshot.
const vanishedRetries = 3

// vanished reports whether the acquire statement was undone because the
// row it saw was deleted before it could take it over (nothing changed; a
// new snapshot will not see that row).
func vanished(err error) bool {
	return pgerror.Code(err) == pgerror.InvalidTextRepr && strings.Contains(err.Error(), vanishedMarker)
}

// statements are the four statements of a Manager, built once for its
// table. Each is one statement and one round trip; every time in them is
// the server's clock_timestamp(); every owner check is in the WHERE.
type statements struct {
	acquire, renew, release, guard string
}

func buildStatements(t tableName) statements {
	tb, seq := t.table(), t.sequence()
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	return statements{
		// cur reads the current row (statement snapshot) so that a lease
		// seen live is answered without locking the row or drawing a token,
		// with the time it has left as a hint for the waiter. Otherwise the
		// INSERT … ON CONFLICT decides under the row lock: the token is drawn
		// in SET, after the lock is held and the WHERE passed, so tokens
		// follow the order in which holders got in, and a loser draws none.
		//
		// One draw per grant: when cur saw a row, the proposed row does not
		// draw (COALESCE evaluates nextval only when cur is empty) but
		// carries the old token negated, a placeholder that only a conflict
		// replaces. If the row vanished meanwhile (a prune), the placeholder
		// would be inserted: the final SELECT then fails with
		// vanishedMarker, which undoes the whole statement, and the
		// Manager sends it again (see Manager.try).
		acquire: fmt.Sprintf(`WITH cur AS (
  SELECT token, expires_at - clock_timestamp() AS remaining FROM %[1]s WHERE name = $1
), won AS (
  INSERT INTO %[1]s AS l (name, owner, token, acquired_at, expires_at)
  SELECT $1, $2::uuid, coalesce(-(SELECT token FROM cur), nextval(%[2]s)),
         clock_timestamp(), clock_timestamp() + $3::bigint * interval '1 microsecond'
  WHERE NOT EXISTS (SELECT 1 FROM cur WHERE remaining > interval '0')
  ON CONFLICT (name) DO UPDATE
    SET owner = excluded.owner, token = nextval(%[2]s), acquired_at = clock_timestamp(),
        expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
    WHERE l.expires_at <= clock_timestamp()
  RETURNING l.token
)
SELECT coalesce((SELECT CASE WHEN token > 0 THEN token ELSE (%[3]s || token)::bigint END FROM won), 0),
       coalesce((SELECT (extract(epoch FROM remaining) * 1000000)::bigint FROM cur), -1)`, tb, lit(seq), lit(vanishedMarker)),
		renew: fmt.Sprintf(`UPDATE %s SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE name = $1 AND owner = $2::uuid AND expires_at > clock_timestamp() RETURNING token`, tb),
		// The release ends the lease now (keeping the row, and so the
		// token's place) and wakes waiters with a notification delivered at
		// commit.
		release: fmt.Sprintf(`WITH r AS (
  UPDATE %s SET expires_at = clock_timestamp()
  WHERE name = $1 AND owner = $2::uuid AND expires_at > clock_timestamp() RETURNING name
)
SELECT 1 FROM r, pg_notify(%s, r.name)`, tb, lit(t.channel())),
		// FOR KEY SHARE: token is a key column (UNIQUE), so a takeover,
		// which changes it, waits for this transaction; a renewal, which
		// changes only expires_at, does not. If the lease is not this
		// holder's, the statement fails (a cast error carrying
		// guardMarker), which aborts the transaction on the server: its
		// writes cannot commit even if the caller ignores the error, and in
		// a pipeline the statements queued after it do not run.
		guard: fmt.Sprintf(`SELECT CASE WHEN count(*) = 1 THEN min(token)
  ELSE (%s || count(*))::bigint END
FROM (SELECT token FROM %s
  WHERE name = $1 AND owner = $2::uuid AND expires_at > clock_timestamp() FOR KEY SHARE) g`, lit(guardMarker), tb),
	}
}
