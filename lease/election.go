package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/election"
	"github.com/sqlock/sqlock/internal/errkind"
)

// ErrNoLeader: nobody leads the election (its lease is free or expired, or
// its holder has not announced itself yet). It matches [sqlock.ErrNoLeader].
var ErrNoLeader = errkind.New(sqlock.ErrNoLeader, "lease: no leader")

// MaxIdentityBytes is the longest candidate identity ([Manager.Candidate]).
const MaxIdentityBytes = election.MaxIdentityBytes

// Candidate is one candidate in the election called name: the leader is
// the holder of the lease called name, its term that lease's fencing
// token, and its identity is recorded beside it in the table's leaders
// table (table_leaders, made by [MigrateElections]). Make it with
// [Manager.Candidate]; it is safe for concurrent use, and a process may
// campaign with the same Candidate again after resigning.
type Candidate struct {
	m        *Manager
	name     string
	identity string
	ttl      time.Duration
	err      error // the input's refusal, returned by every method
	stmt     electionStatements
}

// Candidate returns a candidate called identity (a host, a pid, a job
// id: what the other candidates read as the leader's, [MaxIdentityBytes]
// of UTF-8 text at most) in the election called name, whose leadership is
// a lease of ttl. A bad name, identity or TTL is an error matching
// [ErrInvalid] (and [sqlock.ErrInvalidArgument]) from every method, with
// nothing sent.
//
// The election shares its name with the leases: an Acquire of name takes
// the leadership too (without announcing an identity).
func (m *Manager) Candidate(name, identity string, ttl time.Duration) *Candidate {
	c := &Candidate{m: m, name: name, identity: identity, ttl: ttl}
	switch {
	case m == nil:
		c.err = kit.NilHandle("campaign", name, "Manager")
		return c
	case m.base.Err() != nil:
		c.err = m.base.Err()
		return c
	}
	err := m.check(name, ttl)
	if err == nil {
		err = election.CheckIdentity(identity)
	}
	if err != nil {
		c.err = &Error{Op: "campaign", Name: name, Err: ErrInvalid, Cause: err}
		return c
	}
	c.stmt = buildElectionStatements(m.cfg.table)
	return c
}

// Election is c as a [sqlock.Election], for code that also runs on other
// backends.
func (c *Candidate) Election() sqlock.Election { return election.Adapt[*Leadership](c) }

// Leadership is a won election: the lease on the election's name (its
// Token is the term, its Guard keeps the leader's writes to its term),
// with the identity it announced.
type Leadership struct {
	*Lease
	identity string
}

// A Leadership is a sqlock.Leadership.
var _ sqlock.Leadership = (*Leadership)(nil)

// Identity is the identity the leader announced.
func (l *Leadership) Identity() string { return l.identity }

// Resign ends the leadership: the lease's Release, so that the next
// candidate wins at once.
func (l *Leadership) Resign(ctx context.Context) error {
	if l == nil || l.Lease == nil {
		return kit.NilRelease()
	}
	return l.Release(ctx)
}

// Campaign waits until c leads, for as long as ctx allows (the Manager's
// WithTimeout bounds each wait in line, not the campaign), then announces
// c's identity in the leaders table — only while c's lease is still live,
// so no deposed leader's identity is ever read as the current one — and
// returns the leadership. Leader reports nobody until the announcement:
// a leader is one whose Campaign has returned.
//
// The leadership is renewed every ttl/3; Lost fires when it can no longer
// be trusted, before the server lets another candidate win.
func (c *Candidate) Campaign(ctx context.Context) (*Leadership, error) {
	if c.err != nil {
		return nil, c.err
	}
	l, err := election.Campaign(ctx, func(ctx context.Context) (*Lease, error) {
		return c.m.Acquire(ctx, c.name, c.ttl)
	})
	if err != nil {
		return nil, err
	}
	var one int
	err = c.m.b.queryRow(ctx, c.stmt.proclaim, []any{c.name, l.Token(), c.identity}, &one)
	if err != nil {
		l.Release(ctx)
		if errors.Is(err, errNoRows) {
			return nil, &Error{Op: "campaign", Name: c.name, Err: ErrLost,
				Cause: errors.New("the lease was lost before the leader could announce itself")}
		}
		return nil, &Error{Op: "campaign", Name: c.name, Err: election.Ended(ctx, ErrTimeout), Cause: err}
	}
	return &Leadership{Lease: l, identity: c.identity}, nil
}

// Leader returns the current leader's identity and term: the holder of
// the live lease on the election's name, as it announced itself. Nobody
// leading is an error matching [ErrNoLeader].
func (c *Candidate) Leader(ctx context.Context) (identity string, term int64, err error) {
	l, err := c.leader(ctx)
	return l.Identity, l.Term, err
}

func (c *Candidate) leader(ctx context.Context) (sqlock.Leader, error) {
	if c.err != nil {
		return sqlock.Leader{}, c.err
	}
	if ctx == nil {
		return sqlock.Leader{}, &Error{Op: "leader", Name: c.name, Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil context")}
	}
	var l sqlock.Leader
	err := c.m.b.queryRow(ctx, c.stmt.leader, []any{c.name}, &l.Identity, &l.Term)
	switch {
	case errors.Is(err, errNoRows):
		return sqlock.Leader{}, &Error{Op: "leader", Name: c.name, Err: ErrNoLeader}
	case err != nil:
		return sqlock.Leader{}, &Error{Op: "leader", Name: c.name, Cause: err}
	}
	return l, nil
}

// observePoll is how often Observe reads the leader, unless the Manager
// polls for releases at another interval ([WithPolling]). A change of
// leader by expiry has no notification to wait for, so Observe polls.
const observePoll = 100 * time.Millisecond

// Observe returns a channel that receives the current leader at once and
// then each change (a zero sqlock.Leader: nobody leads), read every
// 100 ms or at the Manager's WithPolling interval, until ctx ends; then it
// is closed.
func (c *Candidate) Observe(ctx context.Context) (<-chan sqlock.Leader, error) {
	if c.err != nil {
		return nil, c.err
	}
	if ctx == nil {
		return nil, &Error{Op: "observe", Name: c.name, Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil context")}
	}
	every := observePoll
	if c.m.cfg.poll > 0 {
		every = c.m.cfg.poll
	}
	return election.Observe(ctx, c.leader, func(ctx context.Context) error {
		t := time.NewTimer(every)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), nil
}

// leaders is the table of the identities the leaders of the table's
// elections announced: table_leaders, which fits wherever table_token_seq
// does.
func (t tableName) leaders() string { return t.Ident(t.Name + "_leaders") }

// electionStatements are a Candidate's statements, each one round trip.
type electionStatements struct{ proclaim, leader string }

func buildElectionStatements(t tableName) electionStatements {
	tb, ld := t.table(), t.leaders()
	return electionStatements{
		// The identity is written only while the lease of that token is
		// live, and never over a later term's: a leader deposed between
		// its grant and this statement records nothing.
		proclaim: fmt.Sprintf(`INSERT INTO %[2]s AS e (name, token, identity, elected_at)
SELECT name, token, $3::text, clock_timestamp() FROM %[1]s
WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp()
ON CONFLICT (name) DO UPDATE SET token = excluded.token, identity = excluded.identity, elected_at = excluded.elected_at
WHERE e.token < excluded.token
RETURNING 1`, tb, ld),
		// The leader is the live lease's holder, if it announced itself
		// for that very token.
		leader: fmt.Sprintf(`SELECT e.identity, l.token FROM %[1]s l JOIN %[2]s e ON e.name = l.name AND e.token = l.token
WHERE l.name = $1 AND l.expires_at > clock_timestamp()`, tb, ld),
	}
}

// ElectionDDL returns the statement that creates the leaders table of the
// leases table (WithTable's, if given): table_leaders, one row per
// election, for migration tools. It is idempotent (IF NOT EXISTS). The
// leases table itself comes from [DDL].
func ElectionDDL(opts ...Option) (string, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return "", err
	}
	return electionDDL(c.table), nil
}

func electionDDL(t tableName) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    name       text        PRIMARY KEY,
    token      bigint      NOT NULL,
    identity   text        NOT NULL CHECK (octet_length(identity) BETWEEN 1 AND %d),
    elected_at timestamptz NOT NULL
);
`, t.leaders(), MaxIdentityBytes)
}

// MigrateElections runs [Migrate], then creates the leases table's
// leaders table (the statement of [ElectionDDL]) if it does not exist.
// Concurrent calls are safe.
func MigrateElections[DB Handle](ctx context.Context, db DB, opts ...Option) error {
	if err := Migrate(ctx, db, opts...); err != nil {
		return err
	}
	c, err := buildConfig(opts)
	if err != nil {
		return &Error{Op: "migrate", Cause: err}
	}
	b := newBackend(db)
	q := fmt.Sprintf("SELECT pg_catalog.pg_advisory_xact_lock(%d);\n", int64(migrateLock)) + electionDDL(c.table)
	if err := b.exec(ctx, q); err != nil {
		return &Error{Op: "migrate", Cause: err}
	}
	return nil
}
