package txlock

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/holds"
)

// ErrTxOptions is matched by the error for pgx transaction modes txlock does
// not know (WithPgxTxOptions): they would be spliced into BEGIN.
var ErrTxOptions = errors.New("txlock: unknown transaction mode")

// notAcquiredMarker is the text of the error a try-once statement raises
// when a key is held elsewhere (SQLSTATE 22P02, the cast of this text to
// int): it turns pg_try_advisory_xact_lock's false into an error, so the
// statement can travel with BEGIN and still be read.
const notAcquiredMarker = "sqlock: advisory lock held elsewhere"

// maxLockTimeout is the largest lock_timeout PostgreSQL accepts (INT_MAX ms).
const maxLockTimeout = (1<<31 - 1) * time.Millisecond

// plan is what one call locks and how, fixed for all its attempts.
type plan struct {
	keys    []advisory.Key // canonical order, no duplicates
	shared  bool
	tryOnce bool
	timeout time.Duration // 0 (TryOnce): no lock_timeout
	lockSQL string        // lockText's, once built
	queries []lockQuery   // the lock statements with bind arguments, for a batch
	tags    []holds.Tag   // the keys' pg_locks identities, in keys' order
}

// newPlan validates keys and builds the lock statements. keys is not
// modified.
func newPlan(keys []advisory.Key, c *config) (*plan, error) {
	if len(keys) == 0 {
		return nil, ErrNoKeys
	}
	for i, k := range keys {
		if !k.Valid() {
			return nil, fmt.Errorf("txlock: key %d: %w", i, advisory.ErrInvalidKey)
		}
	}
	sorted := keys
	if len(keys) > 1 {
		sorted = slices.Clone(keys)
		slices.SortFunc(sorted, advisory.Key.Compare)
		sorted = slices.CompactFunc(sorted, func(a, b advisory.Key) bool { return a.Compare(b) == 0 })
	} else {
		sorted = []advisory.Key{keys[0]}
	}
	if _, _, _, err := pgxModes(c.pgxOpts); err != nil {
		return nil, err
	}
	p := &plan{keys: sorted, shared: c.shared, tryOnce: c.tryOnce}
	if !c.tryOnce {
		p.timeout = c.timeout
	}
	p.queries = p.lockQueries()
	p.tags = make([]holds.Tag, len(sorted))
	for i, k := range sorted {
		c, o, s := k.Locktag()
		p.tags[i] = holds.Tag{ClassID: c, ObjID: o, ObjSubID: s}
	}
	return p, nil
}

// appendLockSQL appends the lock statements, separated by semicolons, to
// be sent by the simple query protocol right after BEGIN (in the same
// message as BEGIN where the driver allows) or on their own inside the
// transaction:
//
//	SET LOCAL lock_timeout = '5000ms';SELECT pg_catalog.pg_advisory_xact_lock(42)
//
// Keys are locked one statement each, in canonical order, so the lock order
// is the statement order. Key arguments are integer literals formatted by
// advisory.Key.AppendArgs and the timeout is formatted from a Duration:
// nothing a caller wrote is ever part of the text.
func (p *plan) appendLockSQL(b []byte, timeout time.Duration) []byte {
	fn := "pg_catalog." + p.lockFunc()
	if p.timeout > 0 {
		b = append(b, "SET LOCAL lock_timeout = '"...)
		b = strconv.AppendInt(b, timeoutMillis(timeout), 10)
		b = append(b, "ms';"...)
	}
	for i, k := range p.keys {
		if i > 0 {
			b = append(b, ';')
		}
		if p.tryOnce {
			// pg_try_* answers false rather than failing; the cast turns
			// false into an error, so the answer can travel with BEGIN.
			b = append(b, "SELECT (CASE WHEN "...)
			b = append(b, fn...)
			b = append(b, '(')
			b = k.AppendArgs(b)
			b = append(b, ") THEN '1' ELSE '"+notAcquiredMarker+"' END)::int"...)
			continue
		}
		b = append(b, "SELECT "...)
		b = append(b, fn...)
		b = append(b, '(')
		b = k.AppendArgs(b)
		b = append(b, ')')
	}
	return b
}

// lockText is the lock statements as text (appendLockSQL), built on first
// use: the batch form, the usual one, does not need it. A plan is used by
// one goroutine at a time.
func (p *plan) lockText() string {
	if p.lockSQL == "" {
		p.lockSQL = string(p.appendLockSQL(make([]byte, 0, 64+96*len(p.keys)), p.timeout))
	}
	return p.lockSQL
}

// lockTextFor is lockText with an attempt's own lock_timeout (a bound the
// caller's deadline set), built for it; lockText's own when it is the
// configured one.
func (p *plan) lockTextFor(timeout time.Duration) string {
	if timeout == p.timeout {
		return p.lockText()
	}
	return string(p.appendLockSQL(make([]byte, 0, 64+96*len(p.keys)), timeout))
}

// lockFunc is the name of the lock function in pg_catalog (always called
// qualified, so that no function of the same name on the search_path can
// stand in for it).
func (p *plan) lockFunc() string {
	switch {
	case p.tryOnce && p.shared:
		return "pg_try_advisory_xact_lock_shared"
	case p.tryOnce:
		return "pg_try_advisory_xact_lock"
	case p.shared:
		return "pg_advisory_xact_lock_shared"
	}
	return "pg_advisory_xact_lock"
}

// timeoutMillis rounds d up to whole milliseconds, within what
// lock_timeout accepts (0 would mean no timeout).
func timeoutMillis(d time.Duration) int64 {
	d = min(d, maxLockTimeout)
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
}

// beginSQL is BEGIN with the transaction modes, then the lock statements:
// one simple-protocol message, one round trip. Every part is a keyword
// this package chose or the lock SQL it built.
func (p *plan) beginSQL(iso, access, deferrable string, timeout time.Duration) string {
	text := p.lockTextFor(timeout)
	b := appendBegin(make([]byte, 0, 64+len(text)), iso, access, deferrable)
	b = append(b, ';')
	b = append(b, text...)
	return string(b)
}

// appendBegin appends BEGIN with the transaction modes.
func appendBegin(b []byte, iso, access, deferrable string) []byte {
	b = append(b, "BEGIN"...)
	if iso != "" {
		b = append(b, " ISOLATION LEVEL "...)
		b = append(b, iso...)
	}
	if access != "" {
		b = append(b, ' ')
		b = append(b, access...)
	}
	if deferrable != "" {
		b = append(b, ' ')
		b = append(b, deferrable...)
	}
	return b
}

// observedKey is the int64 an observe.Event carries for k: the bigint key,
// or the pair packed high/low as pg_locks' classid/objid show it.
func observedKey(k advisory.Key) int64 {
	classid, objid, _ := k.Locktag()
	return int64(uint64(classid)<<32 | uint64(objid))
}

// normalPgxOptions is o with its modes checked (pgxModes) and spelled as
// pgx's constants, and no BeginQuery.
func normalPgxOptions(o pgx.TxOptions) (pgx.TxOptions, error) {
	iso, access, deferrable, err := pgxModes(o)
	if err != nil {
		return pgx.TxOptions{}, err
	}
	return keywordOptions(iso, access, deferrable, o.CommitQuery), nil
}

// keywordOptions turns BEGIN keywords (from pgxModes or sqlIsolation) into
// pgx options: pgx's constants are the keywords in lower case.
func keywordOptions(iso, access, deferrable, commitQuery string) pgx.TxOptions {
	return pgx.TxOptions{
		IsoLevel:       pgx.TxIsoLevel(strings.ToLower(iso)),
		AccessMode:     pgx.TxAccessMode(strings.ToLower(access)),
		DeferrableMode: pgx.TxDeferrableMode(strings.ToLower(deferrable)),
		CommitQuery:    commitQuery,
	}
}

// pgxModes returns the BEGIN keywords for pgx's transaction modes, checked
// against the values PostgreSQL knows: nothing a caller wrote is sent.
func pgxModes(o pgx.TxOptions) (iso, access, deferrable string, err error) {
	switch strings.ToLower(string(o.IsoLevel)) {
	case "":
	case string(pgx.Serializable):
		iso = "SERIALIZABLE"
	case string(pgx.RepeatableRead):
		iso = "REPEATABLE READ"
	case string(pgx.ReadCommitted):
		iso = "READ COMMITTED"
	case string(pgx.ReadUncommitted):
		iso = "READ UNCOMMITTED"
	default:
		return "", "", "", fmt.Errorf("%w: isolation level %q", ErrTxOptions, o.IsoLevel)
	}
	switch strings.ToLower(string(o.AccessMode)) {
	case "":
	case string(pgx.ReadWrite):
		access = "READ WRITE"
	case string(pgx.ReadOnly):
		access = "READ ONLY"
	default:
		return "", "", "", fmt.Errorf("%w: access mode %q", ErrTxOptions, o.AccessMode)
	}
	switch strings.ToLower(string(o.DeferrableMode)) {
	case "":
	case string(pgx.Deferrable):
		deferrable = "DEFERRABLE"
	case string(pgx.NotDeferrable):
		deferrable = "NOT DEFERRABLE"
	default:
		return "", "", "", fmt.Errorf("%w: deferrable mode %q", ErrTxOptions, o.DeferrableMode)
	}
	return iso, access, deferrable, nil
}

// sqlIsolation maps a database/sql isolation level as pgx's stdlib driver
// does; ok is false for levels PostgreSQL has no name for.
func sqlIsolation(l driver.IsolationLevel) (iso string, ok bool) {
	switch sql.IsolationLevel(l) {
	case sql.LevelDefault:
		return "", true
	case sql.LevelReadUncommitted:
		return "READ UNCOMMITTED", true
	case sql.LevelReadCommitted:
		return "READ COMMITTED", true
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		return "REPEATABLE READ", true
	case sql.LevelSerializable:
		return "SERIALIZABLE", true
	}
	return "", false
}
