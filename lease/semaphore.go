package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// A semaphore's slots are one row per name in a table of their own,
// table_slots: its size and, per slot, the holder's owner id, token and
// expiry in arrays. One row per name is what makes the size check and the
// choice of a free slot one atomic step: every grant, renewal and release
// of the name updates that row, so PostgreSQL serialises them on its row
// lock and each sees the row as the one before it left it. Rows of the
// leases table keyed "name#i" could not: a grant would check the sizes of
// the other slots in its snapshot, which a concurrent grant of another
// slot does not appear in, and two sizes could be held at once. The
// table's own key space also keeps a lease called "jobs#0" from being a
// slot of the semaphore "jobs". Tokens come from the leases' sequence, so
// they are unique across leases and slots and outlive both tables.

// ErrSemaphoreSize: a semaphore acquisition asked for a size other than
// the one the name's holders hold it with ([Manager.Semaphore]). Nothing
// changed. It matches [sqlock.ErrSemaphoreSize].
var ErrSemaphoreSize = errkind.New(sqlock.ErrSemaphoreSize, "lease: semaphore held with another size")

// slots is the table of the semaphores' slots: table_slots.
func (t tableName) slots() string { return t.Ident(t.Name + "_slots") }

// SemaphoreDDL returns the statements that create the semaphores' table
// (for the leases table WithTable names, if given) and the token sequence
// it shares with the leases, for migration tools. They are idempotent.
// [Migrate] does not run them: a database without semaphores needs no
// such table. [MigrateSemaphores] does.
func SemaphoreDDL(opts ...Option) (string, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return "", err
	}
	return semaphoreDDL(c.table), nil
}

func semaphoreDDL(t tableName) string {
	return fmt.Sprintf(`CREATE SEQUENCE IF NOT EXISTS %[2]s AS bigint NO CYCLE;
CREATE TABLE IF NOT EXISTS %[1]s (
    name    text          PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND %[3]d),
    size    integer       NOT NULL CHECK (size >= 1),
    owners  uuid[]        NOT NULL,
    tokens  bigint[]      NOT NULL,
    expires timestamptz[] NOT NULL
);
`, t.slots(), t.sequence(), maxNameBytes)
}

// MigrateSemaphores creates the semaphores' table and the token sequence
// if they do not exist (the statements of [SemaphoreDDL]), in one
// transaction. Concurrent calls, and calls beside [Migrate], are safe.
func MigrateSemaphores[DB Handle](ctx context.Context, db DB, opts ...Option) error {
	c, err := buildConfig(opts)
	if err != nil {
		return &Error{Op: "migrate", Cause: err}
	}
	b := newBackend(db)
	if b == nil {
		return &Error{Op: "migrate", Cause: errkind.New(sqlock.ErrNilHandle, "lease: nil database handle")}
	}
	q := fmt.Sprintf("SELECT pg_catalog.pg_advisory_xact_lock(%d);\n", int64(migrateLock)) + semaphoreDDL(c.table)
	if err := b.exec(ctx, q); err != nil {
		return &Error{Op: "migrate", Cause: err}
	}
	return nil
}

// semStatements are a Manager's semaphore statements: each one statement
// and one round trip on the name's row, every time in it the statement's
// start on the server's clock (a statement that waited for the row lock
// judges expiries as of before the wait, which only errs towards "still
// held", and sets an expiry no later than the client believes).
type semStatements struct{ acquire, renew, release string }

// semKey is the notification a slot's release sends: the waiters of the
// semaphore listen for it. A lease with that name wakes them for nothing.
const semKey = "semaphore:"

func buildSemStatements(t tableName) semStatements {
	tb, seq := t.slots(), t.sequence()
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	const now = "statement_timestamp()"
	const exp = now + " + $3::bigint * interval '1 microsecond'"
	return semStatements{
		// $1 name, $2 owner, $3 TTL in µs, $4 size. A name without a row
		// gets one with the caller in slot 1 (a concurrent first insert
		// wins, the other is not granted and tries again). Otherwise the
		// row is updated, under its lock, only if a slot of it is free and
		// the size is the caller's or every slot is free (then the size is
		// the caller's from now on): the lowest free slot becomes the
		// caller's, with a token drawn only then. The answer: the slot
		// (1-based) and token if granted (0, 0 if not), the size of the
		// row's live slots in the statement's snapshot (0: none live) and
		// the time the first of them has left in µs (-1: none).
		acquire: fmt.Sprintf(`WITH cur AS (
  SELECT size, expires FROM %[1]s WHERE name = $1
), ins AS (
  INSERT INTO %[1]s (name, size, owners, tokens, expires)
  SELECT $1, $4::int, ARRAY[$2::uuid] || array_fill(NULL::uuid, ARRAY[$4::int - 1]),
         ARRAY[nextval(%[2]s)] || array_fill(0::bigint, ARRAY[$4::int - 1]),
         ARRAY[%[4]s] || array_fill('-infinity'::timestamptz, ARRAY[$4::int - 1])
  WHERE NOT EXISTS (SELECT 1 FROM cur)
  ON CONFLICT (name) DO NOTHING
  RETURNING 1 AS slot, tokens[1] AS token
), upd AS (
  UPDATE %[1]s AS l SET (size, owners, tokens, expires) = (
    SELECT $4::int,
      array_agg(CASE WHEN i = f.k THEN $2::uuid WHEN l.expires[i] > %[3]s THEN l.owners[i] END ORDER BY i),
      array_agg(CASE WHEN i = f.k THEN nextval(%[2]s) ELSE coalesce(l.tokens[i], 0) END ORDER BY i),
      array_agg(CASE WHEN i = f.k THEN %[4]s ELSE coalesce(l.expires[i], '-infinity') END ORDER BY i)
    FROM generate_series(1, $4::int) AS i,
         (SELECT min(j) AS k FROM generate_series(1, $4::int) AS j
          WHERE coalesce(l.expires[j], '-infinity') <= %[3]s) AS f
  )
  WHERE l.name = $1
    AND (l.size = $4::int OR NOT EXISTS (SELECT 1 FROM unnest(l.expires) AS e WHERE e > %[3]s))
    AND EXISTS (SELECT 1 FROM generate_series(1, $4::int) AS j WHERE coalesce(l.expires[j], '-infinity') <= %[3]s)
  RETURNING array_position(l.owners, $2::uuid) AS slot, l.tokens[array_position(l.owners, $2::uuid)] AS token
)
SELECT coalesce((SELECT slot FROM upd), (SELECT slot FROM ins), 0),
       coalesce((SELECT token FROM upd), (SELECT token FROM ins), 0),
       coalesce((SELECT c.size FROM cur c WHERE EXISTS (SELECT 1 FROM unnest(c.expires) AS e WHERE e > %[3]s)), 0),
       coalesce((SELECT (extract(epoch FROM min(e) - %[3]s) * 1000000)::bigint
                 FROM cur c, unnest(c.expires) AS e WHERE e > %[3]s), -1)`, tb, lit(seq), now, exp),
		renew: fmt.Sprintf(`UPDATE %[1]s SET expires[array_position(owners, $2::uuid)] = %[3]s
WHERE name = $1 AND expires[array_position(owners, $2::uuid)] > %[2]s RETURNING 1`, tb, now, exp),
		release: fmt.Sprintf(`WITH r AS (
  UPDATE %[1]s SET expires[array_position(owners, $2::uuid)] = %[3]s
  WHERE name = $1 AND expires[array_position(owners, $2::uuid)] > %[3]s RETURNING name
)
SELECT 1 FROM r, pg_notify(%[2]s, %[4]s || r.name)`, tb, lit(t.channel()), now, lit(semKey)),
	}
}

// Semaphore returns a [sqlock.SemaphoreAcquirer] of n slots per name on
// m's database, each slot a lease of ttl of its own (a *[Slot]): renewed
// every ttl/3, owner-checked, lost and fenced as a [Lease] is. The table
// must exist ([MigrateSemaphores], [SemaphoreDDL]).
//
// A name is held with one size at a time: an acquisition of another size
// while any slot of it is held is refused with [ErrSemaphoreSize]. Waiters
// learn of a release as a lease's do (LISTEN, or polling), and take the
// first free slot: the semaphore's waiters are not queued, unlike a
// lease's. n below 1, a bad name or a bad ttl is [ErrInvalid], refused by
// every acquisition before anything is sent. WithHolder and WithPayload
// are not stored for slots, and a Slot has no Guard: fence the writes it
// protects by its token ([Slot.Context]).
func (m *Manager) Semaphore(n int, ttl time.Duration) sqlock.SemaphoreAcquirer {
	s := &semaphore{m: m, n: n, ttl: ttl}
	if m != nil && m.base.Err() == nil {
		s.stmt = buildSemStatements(m.cfg.table)
	}
	return ttllock.SemaphoreAcquirer(s.acquire, s.tryAcquire, n)
}

// semaphore is a Manager's semaphore of one size and TTL.
type semaphore struct {
	m    *Manager
	n    int
	ttl  time.Duration
	stmt semStatements
}

func (s *semaphore) acquire(ctx context.Context, name string) (*Slot, error) {
	return s.take(ctx, "acquire", name, true)
}

func (s *semaphore) tryAcquire(ctx context.Context, name string) (*Slot, error) {
	return s.take(ctx, "tryacquire", name, false)
}

func (s *semaphore) take(ctx context.Context, op, name string, wait bool) (*Slot, error) {
	m := s.m
	if m == nil {
		return nil, kit.NilHandle(op, name, "Manager")
	}
	a := &slotAcquisition{sem: s, owner: newOwner(), listen: m.ntf != nil}
	defer func() { a.sub.close() }() // the subscription of the last pause, if any
	return ttllock.Acquire(ctx, &m.base, a, ttllock.Request{Op: op, Name: name, TTL: s.ttl, Wait: wait},
		func() (*Slot, *ttllock.Lock) {
			l := &Slot{a: a}
			return l, &l.tl
		})
}

// slotAcquisition is one acquisition of a slot, its owner id, and once
// granted the slot's server side: to the TTL-lock toolkit a ttllock.Store,
// Admitter, Pauser and Held.
type slotAcquisition struct {
	sem    *semaphore
	owner  string
	name   string
	ttl    time.Duration
	index  int // 0-based, once granted
	sub    *subscription
	listen bool
	sleep  ttllock.Backoff
}

// Check refuses bad input before anything is sent.
func (a *slotAcquisition) Check(name string, ttl time.Duration) (time.Duration, error) {
	if err := ttllock.CheckSize(a.sem.n); err != nil {
		return 0, err
	}
	return ttl, a.sem.m.check(name, ttl)
}

// Admit refuses a TTL too short for the round trips measured, as a
// lease's acquisition does.
func (a *slotAcquisition) Admit(ctx context.Context, ttl time.Duration) error {
	m := a.sem.m
	if m.ttlTooShort(ttl) != nil {
		m.remeasure(ctx)
		if err := m.ttlTooShort(ttl); err != nil {
			return ttllock.Refuse(ErrTTLTooShort, err)
		}
	}
	return nil
}

// Grant is one attempt; a failed one gives back what the server may have
// granted.
func (a *slotAcquisition) Grant(ctx context.Context, name string, ttl time.Duration, _ bool) (ttllock.Grant, error) {
	m := a.sem.m
	a.name, a.ttl = name, ttl
	var slot, token, held, remaining int64
	sent := time.Now()
	err := m.b.queryRow(ctx, a.sem.stmt.acquire, []any{name, a.owner, ttl.Microseconds(), a.sem.n}, &slot, &token, &held, &remaining)
	if err != nil {
		a.cleanUp()
		return ttllock.Grant{}, a.schemaError(err)
	}
	m.observeRTT(time.Since(sent))
	switch {
	case token > 0:
		a.index = int(slot) - 1
		return ttllock.Grant{Held: a, Token: token}, nil
	case held != 0 && held != int64(a.sem.n):
		return ttllock.Grant{}, ttllock.Refuse(ErrSemaphoreSize, ttllock.SizeMismatch(a.sem.n, int(held)))
	}
	return ttllock.Grant{Remaining: time.Duration(remaining) * time.Microsecond}, nil
}

// schemaError names the cure of a missing semaphores table.
func (a *slotAcquisition) schemaError(err error) error {
	switch pgerror.Code(err) {
	case "42P01", "42703":
		return ttllock.Refuse(ErrSchema, fmt.Errorf("%s lacks what this version needs: run lease.MigrateSemaphores or the statements of lease.SemaphoreDDL: %w",
			a.sem.m.cfg.table.slots(), err))
	}
	return err
}

// Pause waits for a release of a slot of the name (a notification, when
// the Manager listens), the first holder's expiry, or a poll.
func (a *slotAcquisition) Pause(ctx context.Context, remaining time.Duration) error {
	m := a.sem.m
	if a.sub == nil && a.listen {
		s, err := m.ntf.subscribe(ctx, semKey+a.name)
		if err == nil {
			a.sub = s
			return nil // try again at once: a release before the LISTEN is seen by the try
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.listen = false
	}
	if a.sub == nil || a.sub.dead.Load() {
		return a.sleep.Pause(ctx, remaining)
	}
	d := m.safetyPoll()
	if remaining > 0 {
		d = min(d, remaining+expiryGrace+rand.N(expiryGrace))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-a.sub.c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Renew extends the slot by its TTL, owner-checked.
func (a *slotAcquisition) Renew(ctx context.Context) (refused bool, err error) {
	m := a.sem.m
	sent := time.Now()
	var one int
	err = m.b.queryRow(ctx, a.sem.stmt.renew, []any{a.name, a.owner, a.ttl.Microseconds()}, &one)
	switch {
	case err == nil:
		m.observeRTT(time.Since(sent))
		return false, nil
	case errors.Is(err, errNoRows):
		return true, nil
	}
	return permanent(err), err
}

// Release ends the slot now, owner-checked, and wakes the waiters.
func (a *slotAcquisition) Release(ctx context.Context) (notHeld bool, err error) {
	var one int
	err = a.sem.m.b.queryRow(ctx, a.sem.stmt.release, []any{a.name, a.owner}, &one)
	if errors.Is(err, errNoRows) {
		return true, nil
	}
	return false, err
}

// cleanUp releases what an attempt whose answer was lost may have been
// granted, bounded, detached from the attempt's context.
func (a *slotAcquisition) cleanUp() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	a.Release(ctx)
}

// Slot is a held slot of a lease semaphore ([Manager.Semaphore]): a lease
// of its own, with a fencing token. Its methods are safe for concurrent
// use.
type Slot struct {
	a  *slotAcquisition
	tl ttllock.Lock
}

// A Slot is a [sqlock.Slot]: a [sqlock.Fenced] lock with its index.
var _ sqlock.Slot = (*Slot)(nil)

// Name is the semaphore's name.
func (l *Slot) Name() string { return l.tl.Name() }

// Index is which of the semaphore's slots this is, 0 to N−1.
func (l *Slot) Index() int { return l.a.index }

// Size is the semaphore's number of slots.
func (l *Slot) Size() int { return l.a.sem.n }

// Token is the slot's fencing token: greater than that of every earlier
// holder of any slot or lease of the table. Fence the data of this slot
// (Index) with it.
func (l *Slot) Token() int64 { return l.tl.Token() }

// Deadline is the local time until which the slot is trusted, as a
// lease's [Lease.Deadline].
func (l *Slot) Deadline() time.Time { return l.tl.Deadline() }

// Lost is closed when the slot can no longer be trusted, as a lease's
// [Lease.Lost].
func (l *Slot) Lost() <-chan struct{} { return l.tl.Lost() }

// Err is nil while the slot is trusted, then an error matching [ErrLost].
func (l *Slot) Err() error { return l.tl.Err() }

// Context returns a context that ends when the slot is lost and carries
// its fencing token ([sqlock.WithFencingToken]).
func (l *Slot) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.tl.Context(parent)
}

// Release frees the slot on the server (owner-checked) and wakes the
// waiters, as [Lease.Release] does a lease.
func (l *Slot) Release(ctx context.Context) error {
	if l == nil {
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}
