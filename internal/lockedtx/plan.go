package lockedtx

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/heldkeys"
)

// notAcquiredMarker is the text of the error a try-once statement raises
// when a key is held elsewhere (SQLSTATE 22P02, the cast of this text to
// int): it turns pg_try_advisory_xact_lock's false into an error, so that
// several answers can travel in one simple-protocol message and still be
// read.
const notAcquiredMarker = "sqlock: advisory lock held elsewhere"

// maxLockTimeout is the largest lock_timeout PostgreSQL accepts (INT_MAX ms).
const maxLockTimeout = (1<<31 - 1) * time.Millisecond

// plan is what one call locks and how, fixed for all its attempts: the
// keys in canonical order and the lock statements in both forms — bound
// (queries, sent in a batch with BEGIN or prepared on their own) and text
// (lockText, sent by the simple protocol).
type plan struct {
	keys    []advisory.Key // canonical order, no duplicates
	shared  bool
	tryOnce bool
	timeout time.Duration  // 0 (TryOnce): no lock_timeout
	lockSQL string         // lockText's, once built
	queries []lockQuery    // the lock statements with bind arguments
	tags    []heldkeys.Tag // the keys' pg_locks identities, in keys' order
}

// lockQuery is one lock statement with its bind arguments.
type lockQuery struct {
	sql  string
	args []any
}

// newPlan validates key and c.More and builds the lock statements.
func newPlan(key advisory.Key, c *Config) (*plan, error) {
	keys := []advisory.Key{key}
	if len(c.More) > 0 {
		keys = append(keys, c.More...)
	}
	for i, k := range keys {
		if !k.Valid() {
			return nil, fmt.Errorf("txlock: key %d: %w", i, advisory.ErrInvalidKey)
		}
	}
	if len(keys) > 1 {
		slices.SortFunc(keys, advisory.Key.Compare)
		keys = slices.CompactFunc(keys, func(a, b advisory.Key) bool { return a.Compare(b) == 0 })
	}
	if _, _, _, err := pgxModes(c.PgxOpts); err != nil {
		return nil, err
	}
	p := &plan{keys: keys, shared: c.Shared, tryOnce: c.TryOnce}
	if !c.TryOnce {
		p.timeout = c.Timeout
	}
	p.queries = p.lockQueries()
	p.tags = make([]heldkeys.Tag, len(keys))
	for i, k := range keys {
		c, o, s := k.Locktag()
		p.tags[i] = heldkeys.Tag{ClassID: c, ObjID: o, ObjSubID: s}
	}
	return p, nil
}

// lockFuncs are the lock functions in pg_catalog (always called
// qualified, so that no function of the same name on the search_path can
// stand in for them), indexed by lockFuncIndex.
var lockFuncs = [4]string{"pg_advisory_xact_lock", "pg_advisory_xact_lock_shared",
	"pg_try_advisory_xact_lock", "pg_try_advisory_xact_lock_shared"}

// lockFuncIndex is p's lock function's index in lockFuncs (and
// boundLockSQL): bit 0 shared, bit 1 try-once.
func (p *plan) lockFuncIndex() int {
	i := 0
	if p.shared {
		i |= 1
	}
	if p.tryOnce {
		i |= 2
	}
	return i
}

func (p *plan) lockFunc() string { return lockFuncs[p.lockFuncIndex()] }

// timeoutFrom is the clause that sets lock_timeout for the transaction
// (set_config(…, true) is SET LOCAL) from a subquery, which PostgreSQL
// runs before the lock call because it is volatile and so not pulled up.
const timeoutFrom = " FROM (SELECT pg_catalog.set_config('lock_timeout', $1::text, true)) s"

// boundLockSQL is the text of every bound lock statement there is, built
// once rather than for every call: [lock function (lockFuncIndex)][key of
// one int8, of two int4][with the timeout clause, whose argument is $1].
var boundLockSQL = func() (t [4][2][2]string) {
	for f, fn := range lockFuncs {
		call := "SELECT pg_catalog." + fn
		for timeout, from := range [2]string{"", timeoutFrom} {
			first := 1 + timeout // the timeout, when there is one, is $1
			t[f][0][timeout] = call + "($" + strconv.Itoa(first) + "::int8)" + from
			t[f][1][timeout] = call + "($" + strconv.Itoa(first) + "::int4, $" + strconv.Itoa(first+1) + "::int4)" + from
		}
	}
	return t
}()

// lockQueries builds p's bound lock statements: one per key, in canonical
// order (so the lock order is the statement order). With a timeout, the
// first also sets lock_timeout (timeoutFrom). Arguments are the key's
// integers and a duration formatted here; SQL text is this package's.
func (p *plan) lockQueries() []lockQuery {
	sqls := &boundLockSQL[p.lockFuncIndex()]
	qs := make([]lockQuery, len(p.keys))
	for i, k := range p.keys {
		timeout := 0
		if p.timeout > 0 && i == 0 {
			timeout = 1
		}
		args := make([]any, timeout, timeout+2)
		if timeout == 1 {
			args[0] = timeoutArg(p.timeout)
		}
		if a, b, ok := k.Pair(); ok {
			qs[i] = lockQuery{sql: sqls[1][timeout], args: append(args, a, b)}
		} else {
			n, _ := k.Int64()
			qs[i] = lockQuery{sql: sqls[0][timeout], args: append(args, n)}
		}
	}
	return qs
}

// timeoutArg is lock_timeout's value for d, in whole milliseconds.
func timeoutArg(d time.Duration) string {
	var buf [24]byte
	return string(append(strconv.AppendInt(buf[:0], timeoutMillis(d), 10), "ms"...))
}

// appendLockSQL appends the lock statements, separated by semicolons, to
// be sent by the simple query protocol inside the transaction:
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
			// false into an error, so that every answer is read.
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

// lockText is the lock statements as text (appendLockSQL) with an
// attempt's lock_timeout: the plan's own, built on first use (the batch
// form, the usual one, does not need it; a plan is used by one goroutine
// at a time), or, for a bound the caller's deadline set, built for it.
func (p *plan) lockText(timeout time.Duration) string {
	if timeout != p.timeout {
		return string(p.appendLockSQL(make([]byte, 0, 64+96*len(p.keys)), timeout))
	}
	if p.lockSQL == "" {
		p.lockSQL = string(p.appendLockSQL(make([]byte, 0, 64+96*len(p.keys)), p.timeout))
	}
	return p.lockSQL
}

// timeoutMillis rounds d up to whole milliseconds, within what
// lock_timeout accepts (0 would mean no timeout).
func timeoutMillis(d time.Duration) int64 {
	d = min(d, maxLockTimeout)
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
}

// pgxModes returns the BEGIN keywords for pgx's transaction modes, checked
// against the values PostgreSQL knows: nothing a caller wrote is sent. An
// unknown mode is an invalid option (sqlock.ErrInvalidOption).
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
		return "", "", "", errkind.New(sqlock.ErrInvalidOption, "txlock: WithPgxTxOptions: unknown isolation level %q", o.IsoLevel)
	}
	switch strings.ToLower(string(o.AccessMode)) {
	case "":
	case string(pgx.ReadWrite):
		access = "READ WRITE"
	case string(pgx.ReadOnly):
		access = "READ ONLY"
	default:
		return "", "", "", errkind.New(sqlock.ErrInvalidOption, "txlock: WithPgxTxOptions: unknown access mode %q", o.AccessMode)
	}
	switch strings.ToLower(string(o.DeferrableMode)) {
	case "":
	case string(pgx.Deferrable):
		deferrable = "DEFERRABLE"
	case string(pgx.NotDeferrable):
		deferrable = "NOT DEFERRABLE"
	default:
		return "", "", "", errkind.New(sqlock.ErrInvalidOption, "txlock: WithPgxTxOptions: unknown deferrable mode %q", o.DeferrableMode)
	}
	return iso, access, deferrable, nil
}
