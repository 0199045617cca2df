package inspect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/hash"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/keynames"
	"github.com/sqlock/sqlock/internal/nilcheck"
	"github.com/sqlock/sqlock/internal/pgident"
)

// ErrPrivilege: the role may not see other roles' sessions — it is neither
// a superuser nor a member of pg_read_all_stats — and some advisory locks
// belong to such sessions. The error names the role and the GRANT that
// fixes it. Nothing is returned rather than locks without holders.
var ErrPrivilege = errors.New("inspect: insufficient privilege")

// Queryer runs a query: *sql.DB, *sql.Conn and *sql.Tx are Queryers. For a
// pgx pool, use stdlib.OpenDBFromPool.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Snapshot is what the server showed at one moment.
type Snapshot struct {
	At     time.Time // the server's now()
	Locks  []Lock    // advisory locks of the current database, grouped by key (see Take)
	Leases []Lease   // rows of the lease table, if it exists
	// LeaseTable reports whether the lease table (WithLeaseTable) exists:
	// without it Leases is empty because there is nowhere to hold one.
	LeaseTable bool
}

// Scope is how long a lock lasts: its session, or its transaction.
type Scope uint8

const (
	// ScopeUnknown: pg_locks does not say, and the holder's state does not
	// tell (see [Lock.Scope]).
	ScopeUnknown Scope = iota
	ScopeSession
	ScopeTransaction
)

func (s Scope) String() string {
	switch s {
	case ScopeSession:
		return "session"
	case ScopeTransaction:
		return "xact"
	}
	return "?"
}

// Lock is one row of pg_locks for an advisory lock: a session holding it
// (Granted) or waiting for it.
type Lock struct {
	// Key is the lock's key; made from its text by advisory.KeyOf or
	// advisory.KeyText when the name is known, so Key.String shows it.
	Key advisory.Key
	// Name is the text the key was made from, or "" when unknown. Names come
	// from [WithNames] and from the table advisory.WithKeyNames writes; a
	// name is used only if it hashes to the key.
	Name    string
	Shared  bool
	Granted bool
	// Scope is inferred, as pg_locks does not record it: a lock held by a
	// session outside any transaction is a session lock (a transaction lock
	// ends with its transaction); a lock whose session's current or last
	// statement is the lock call says so by the function's name
	// (pg_advisory_xact_lock or pg_advisory_lock). Otherwise ScopeUnknown.
	Scope Scope
	// For is how long the lock has been waited for (exact: pg_locks.waitstart)
	// or held. PostgreSQL does not record when a lock was granted, so a hold
	// is exact only when the session's last statement names this key in its
	// last lock call, as an integer literal in the lock's mode
	// (SELECT pg_advisory_lock(42)), does nothing after it, and has ended:
	// held since that statement ended. A statement whose key is a bind
	// parameter ($1) may as well have been a failed try of another key, so
	// it proves nothing. Otherwise For is an upper bound (AtMost): since the
	// running or last statement began when it names the key, else since the
	// transaction began for a transaction lock, since the session began for
	// the rest. A statement that takes again a lock its session already held
	// (PostgreSQL counts re-entrant holds, pg_locks shows one row) is taken
	// for the one that took it.
	For    time.Duration
	AtMost bool
	// BlockedBy lists the pids a waiter waits for (pg_blocking_pids): the
	// holders, and the waiters queued before it in a conflicting mode.
	BlockedBy []int
	Session   Session
}

// Session is the server process holding or waiting for a lock, from
// pg_stat_activity.
type Session struct {
	PID             int
	User            string
	ApplicationName string
	ClientAddr      string // "" for a Unix socket
	BackendStart    time.Time
	XactStart       time.Time // zero outside a transaction
	State           string    // active, idle, idle in transaction, …
	Query           string    // current or last statement
}

// Lease is one row of the lease table (package lease).
type Lease struct {
	Name  string
	Owner string
	// Holder and Payload are what the holder's Manager stored with the
	// lease (lease.WithHolder, lease.WithPayload): "" and nil if none, or
	// if the table predates them.
	Holder    string
	Payload   []byte
	Token     int64
	Acquired  time.Time
	Expires   time.Time
	Held      time.Duration // since Acquired, by the server's clock
	ExpiresIn time.Duration // negative once expired: free for the next Acquire
}

// Option configures Take.
type Option func(*config) error

type config struct {
	names      map[int64]string // KeyOf and KeyText values of WithNames
	leaseTable string           // quoted, from leaseTableIdent
}

// defaultLeaseTable is lease.DefaultTable, quoted.
const defaultLeaseTable = `"sqlock_leases"`

// badName is the kind of a bad name given through an option: an invalid
// option and an invalid argument.
var badName = errors.Join(sqlock.ErrInvalidOption, sqlock.ErrInvalidArgument)

// WithNames resolves keys made from any of names by advisory.KeyOf or
// advisory.KeyText, without a table: for keys whose Lockers do not record
// names, and for locks taken by SQL (pg_advisory_lock(hashtextextended(name, 0))).
func WithNames(names ...string) Option {
	return func(c *config) error {
		for _, n := range names {
			if n == "" {
				return errkind.New(badName, "inspect: WithNames: empty name")
			}
			c.names[hash.TextExtended(n, 0)] = n
			if _, ok := c.names[int64(hash.Text(n))]; !ok {
				c.names[int64(hash.Text(n))] = n
			}
		}
		return nil
	}
}

// WithLeaseTable reads leases from table (default "sqlock_leases", package
// lease's default), named as lease.WithTable names it: [schema.]name of
// letters, digits and underscores, case kept (lease quotes it: a table
// made with lease.WithTable("Leases_Mixed") is "Leases_Mixed", not
// leases_mixed).
func WithLeaseTable(table string) Option {
	return func(c *config) error {
		ident, err := leaseTableIdent(table)
		if err != nil {
			return err
		}
		c.leaseTable = ident
		return nil
	}
}

// leaseTableIdent reads a lease table's name by package lease's rule (the
// table at most 53 bytes, so that its <table>_token_seq sequence's name
// fits) and quotes it as lease does. The one form serves both the probe
// (to_regclass) and the read, so both name the same table.
func leaseTableIdent(table string) (string, error) {
	t, err := pgident.ParseTable("inspect: WithLeaseTable", table, pgident.MaxLen-len("_token_seq"))
	if err != nil {
		return "", err
	}
	return t.String(), nil
}

// Take reads the advisory locks of q's current database, who holds and
// who waits for each, and the leases. Locks come grouped by key, the key
// with the longest wait first; in each group the holders, then the waiters,
// longest wait first. It runs three or four read-only
// statements and takes no lock. Errors: [ErrPrivilege];
// [sqlock.ErrUnsupported] for a server that is not PostgreSQL 9.6 or later;
// [sqlock.ErrNilHandle], [sqlock.ErrInvalidOption]; the driver's error
// otherwise.
func Take(ctx context.Context, q Queryer, opts ...Option) (*Snapshot, error) {
	c := config{names: map[int64]string{}, leaseTable: defaultLeaseTable}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if nilcheck.Is(q) {
		return nil, errkind.New(sqlock.ErrNilHandle, "inspect: nil Queryer")
	}
	srv, err := probe(ctx, q, c.leaseTable)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{}
	hidden, err := readLocks(ctx, q, srv, &c, s)
	if err != nil {
		return nil, err
	}
	if hidden > 0 && !srv.canSeeAll {
		return nil, errkind.New(ErrPrivilege,
			"inspect: %d advisory lock(s) belong to sessions role %q may not see: "+
				"it is neither a superuser nor a member of pg_read_all_stats (GRANT pg_read_all_stats TO %s)",
			hidden, srv.user, pgx.Identifier{srv.user}.Sanitize())
	}
	if s.LeaseTable = srv.leases; srv.leases {
		if err := readLeases(ctx, q, c.leaseTable, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// server is what probe learned.
type server struct {
	version   int // server_version_num
	user      string
	canSeeAll bool // superuser or pg_read_all_stats
	names     bool // the key-name table exists
	leases    bool // the lease table exists
}

// probe learns what the server is and which tables exist; leaseTable is
// quoted (leaseTableIdent), as to_regclass reads it exactly as a query's
// FROM would.
func probe(ctx context.Context, q Queryer, leaseTable string) (server, error) {
	var s server
	var version string
	rows, err := q.QueryContext(ctx, `SELECT version(), current_setting('server_version_num')::int, current_user,
		(SELECT rolsuper FROM pg_roles WHERE rolname = current_user) OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER'),
		to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, keynames.Table, leaseTable)
	if err == nil {
		defer rows.Close()
		if rows.Next() {
			err = rows.Scan(&version, &s.version, &s.user, &s.canSeeAll, &s.names, &s.leases)
		} else if err = rows.Err(); err == nil {
			err = errors.New("no row")
		}
	}
	if err != nil {
		if isDriverSyntaxOrMissing(err) {
			return s, errkind.New(sqlock.ErrUnsupported, "inspect: the server does not look like PostgreSQL 9.6 or later: %v", err)
		}
		return s, fmt.Errorf("inspect: %w", err)
	}
	if !strings.HasPrefix(version, "PostgreSQL ") || strings.Contains(version, "CockroachDB") || s.version < 90600 {
		return s, errkind.New(sqlock.ErrUnsupported, "inspect: not PostgreSQL 9.6 or later: %q", version)
	}
	return s, nil
}

// isDriverSyntaxOrMissing reports a server that answered but did not know
// PostgreSQL's functions or catalogs (class 42: syntax error or access rule
// violation, e.g. 42883 undefined function) or the feature (0A000).
func isDriverSyntaxOrMissing(err error) bool {
	var s interface{ SQLState() string }
	if !errors.As(err, &s) {
		return false
	}
	code := s.SQLState()
	return strings.HasPrefix(code, "42") || code == "0A000"
}

const locksSQL = `SELECT l.classid::int8, l.objid::int8, l.objsubid::int4, l.mode = 'ShareLock', l.granted, l.pid,
	now(), %[1]s,
	CASE WHEN l.granted THEN '' ELSE array_to_string(pg_blocking_pids(l.pid), ',') END,
	coalesce(a.usename, ''), coalesce(a.application_name, ''), coalesce(host(a.client_addr), ''),
	a.backend_start, a.xact_start, coalesce(a.state, ''), a.state_change, a.query_start, coalesce(a.query, ''),
	a.query = '<insufficient privilege>', %[2]s
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
%[3]s
WHERE l.locktype = 'advisory' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY (l.classid, l.objid, l.objsubid), NOT l.granted, %[1]s NULLS FIRST, l.pid`

func readLocks(ctx context.Context, q Queryer, srv server, c *config, s *Snapshot) (hidden int, err error) {
	waitstart := "NULL::timestamptz"
	if srv.version >= 140000 {
		waitstart = "l.waitstart"
	}
	name, join := "''", ""
	if srv.names {
		name = "coalesce(n.name, '')"
		join = "LEFT JOIN " + keynames.Table + " n ON l.objsubid = 1 AND n.key = (l.classid::int8 << 32) | l.objid::int8"
	}
	rows, err := q.QueryContext(ctx, fmt.Sprintf(locksSQL, waitstart, name, join))
	if err != nil {
		return 0, fmt.Errorf("inspect: read pg_locks: %w", err)
	}
	defer rows.Close()
	var times []lockTimes
	for rows.Next() {
		var (
			classid, objid                                     int64
			objsubid                                           int32
			now                                                time.Time
			waitStart, backendStart, xactStart, since, queryAt sql.NullTime
			blockers, name                                     string
			isHidden                                           sql.NullBool
			lk                                                 Lock
		)
		if err := rows.Scan(&classid, &objid, &objsubid, &lk.Shared, &lk.Granted, &lk.Session.PID,
			&now, &waitStart, &blockers, &lk.Session.User, &lk.Session.ApplicationName, &lk.Session.ClientAddr,
			&backendStart, &xactStart, &lk.Session.State, &since, &queryAt, &lk.Session.Query, &isHidden, &name); err != nil {
			return 0, fmt.Errorf("inspect: read pg_locks: %w", err)
		}
		s.At = now
		if isHidden.Bool {
			hidden++
		}
		lk.Session.BackendStart, lk.Session.XactStart = backendStart.Time, xactStart.Time
		lk.Key, lk.Name = resolve(classid, objid, objsubid, name, c.names)
		for _, p := range strings.Split(blockers, ",") {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err == nil {
				lk.BlockedBy = append(lk.BlockedBy, pid)
			}
		}
		lk.Scope = scopeOf(&lk)
		s.Locks = append(s.Locks, lk)
		times = append(times, lockTimes{now, waitStart, since, queryAt})
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("inspect: read pg_locks: %w", err)
	}
	for i := range s.Locks {
		lk := &s.Locks[i]
		lk.For, lk.AtMost = duration(lk, times[i])
	}
	sortLocks(s.Locks)
	return hidden, nil
}

// sortLocks groups the locks by key, the key with the longest wait first
// (then by key); in each group the holders come first, then the waiters,
// longest wait first.
func sortLocks(ls []Lock) {
	longest := map[advisory.Key]time.Duration{}
	for _, l := range ls {
		k := l.Key
		if !l.Granted && l.For > longest[k] {
			longest[k] = l.For
		}
	}
	slices.SortStableFunc(ls, func(a, b Lock) int {
		if c := cmpDesc(longest[a.Key], longest[b.Key]); c != 0 {
			return c
		}
		if c := a.Key.Compare(b.Key); c != 0 {
			return c
		}
		if a.Granted != b.Granted {
			if a.Granted {
				return -1
			}
			return 1
		}
		return cmpDesc(a.For, b.For)
	})
}

func cmpDesc(a, b time.Duration) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// resolve turns a pg_locks locktag into a Key, named when a known name
// hashes to it.
func resolve(classid, objid int64, objsubid int32, name string, names map[int64]string) (advisory.Key, string) {
	if objsubid == 2 {
		return advisory.KeyPair(int32(uint32(classid)), int32(uint32(objid))), ""
	}
	v := int64(uint64(classid)<<32 | uint64(uint32(objid)))
	for _, n := range []string{name, names[v]} {
		switch {
		case n == "":
		case hash.TextExtended(n, 0) == v:
			return advisory.KeyOf(n), n
		case int64(hash.Text(n)) == v:
			return advisory.KeyText(n), n
		}
	}
	return advisory.KeyInt(v), ""
}

func scopeOf(lk *Lock) Scope {
	q := strings.ToLower(lk.Session.Query)
	switch {
	case lk.Granted && lk.Session.State == "idle":
		return ScopeSession // no transaction is open: only a session lock outlives one
	case strings.Contains(q, "advisory_xact_lock"):
		return ScopeTransaction
	case strings.Contains(q, "advisory_lock"):
		return ScopeSession
	}
	return ScopeUnknown
}

// lockTimes are the server's clock and the times a row's duration comes from.
type lockTimes struct {
	now                                time.Time
	waitStart, stateChange, queryStart sql.NullTime
}

// duration is how long lk has been waited for or held; atMost when it is
// only an upper bound (see Lock.For).
func duration(lk *Lock, t lockTimes) (time.Duration, bool) {
	since := func(at time.Time) time.Duration { return max(t.now.Sub(at), 0) }
	switch {
	case !lk.Granted && t.waitStart.Valid:
		return since(t.waitStart.Time), false
	case !lk.Granted:
		return 0, true // before PostgreSQL 14: unknown
	}
	switch namedBy(lk.Session.Query, lk.Key, lk.Shared) {
	case namedLast:
		if t.stateChange.Valid && lk.Session.State != "active" {
			return since(t.stateChange.Time), false
		}
		fallthrough
	case namedEarlier:
		if t.queryStart.Valid {
			return since(t.queryStart.Time), true
		}
	}
	switch {
	case lk.Scope == ScopeTransaction && !lk.Session.XactStart.IsZero():
		return since(lk.Session.XactStart), true
	case !lk.Session.BackendStart.IsZero():
		return since(lk.Session.BackendStart), true
	}
	return 0, true
}

// naming is what a statement says of a key: nothing, that a lock call
// other than its last one names it, or that its last lock call names it
// and nothing runs after that call.
type naming uint8

const (
	notNamed naming = iota
	namedEarlier
	namedLast
)

// lockCallRE matches a call of an advisory lock function (not an unlock)
// whose arguments are integer literals: the function's shared suffix, and
// the one or two arguments.
var lockCallRE = regexp.MustCompile(`(?i)\bpg_(?:try_)?advisory_(?:xact_)?lock(_shared)?\s*\(\s*(-?[0-9]+)\s*(?:,\s*(-?[0-9]+)\s*)?\)`)

// namedBy reports how query names key in a lock call of the given mode. A
// call is the last only if the query runs nothing after it: no function
// call, no other statement, no FROM (a lock call per row).
func namedBy(query string, key advisory.Key, shared bool) naming {
	calls := lockCallRE.FindAllStringSubmatchIndex(query, -1)
	for i := len(calls) - 1; i >= 0; i-- {
		c := calls[i]
		if !callNames(query, c, key) || (c[3] > c[2]) != shared {
			continue
		}
		if rest := strings.ToLower(strings.TrimRight(query[c[1]:], " \t\r\n;")); i == len(calls)-1 &&
			!strings.ContainsAny(rest, "(;") && !strings.Contains(rest, "from") {
			return namedLast
		}
		return namedEarlier
	}
	return notNamed
}

// callNames reports whether the lock call at submatch indexes c of query
// takes key.
func callNames(query string, c []int, key advisory.Key) bool {
	arg := func(i int) (int64, bool) {
		if c[2*i] < 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(query[c[2*i]:c[2*i+1]], 10, 64)
		return n, err == nil
	}
	x, ok := arg(2)
	if !ok {
		return false
	}
	y, pair := arg(3)
	if a, b, isPair := key.Pair(); isPair {
		return pair && x == int64(a) && y == int64(b)
	}
	n, _ := key.Int64()
	return !pair && c[6] < 0 && x == n
}

// readLeases reads the lease table, ident as leaseTableIdent quoted it.
// The holder and payload are read through the row as JSON, which has them
// only if the table does: one statement reads a table of any version.
func readLeases(ctx context.Context, q Queryer, ident string, s *Snapshot) error {
	rows, err := q.QueryContext(ctx, `SELECT name, owner::text, token, acquired_at, expires_at, now(),
		coalesce(to_jsonb(l) ->> 'holder', ''), decode(substr(to_jsonb(l) ->> 'payload', 3), 'hex')
		FROM `+ident+` l ORDER BY name`)
	if err != nil {
		return fmt.Errorf("inspect: read leases: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var l Lease
		var now time.Time
		if err := rows.Scan(&l.Name, &l.Owner, &l.Token, &l.Acquired, &l.Expires, &now, &l.Holder, &l.Payload); err != nil {
			return fmt.Errorf("inspect: read leases: %w", err)
		}
		l.Held, l.ExpiresIn = now.Sub(l.Acquired), l.Expires.Sub(now)
		if s.At.IsZero() {
			s.At = now
		}
		s.Leases = append(s.Leases, l)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("inspect: read leases: %w", err)
	}
	return nil
}

// Waiters counts the sessions waiting for each key, by the key's name (or
// its number when the name is unknown).
func (s *Snapshot) Waiters() map[string]int {
	m := map[string]int{}
	for _, l := range s.Locks {
		if !l.Granted {
			m[l.KeyLabel()]++
		}
	}
	return m
}

// KeyLabel is the lock's name, or its key as pg_locks shows it: the bigint,
// or "(a,b)" for a pair.
func (l Lock) KeyLabel() string {
	if l.Name != "" {
		return l.Name
	}
	if a, b, ok := l.Key.Pair(); ok {
		return fmt.Sprintf("(%d,%d)", a, b)
	}
	n, _ := l.Key.Int64()
	return fmt.Sprint(n)
}
