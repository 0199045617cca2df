package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/lease"
)

// A Phase is one step of a request whose work is outside the database (a
// call to a payment provider). See [RunPhases].
type Phase struct {
	// Name identifies the phase in the forwarded key; unique in a request.
	Name string
	// Run does the phase's work and returns its output, recorded when the
	// phase completes and passed to later phases (in done, one per
	// completed phase, in order) and attempts. forward is a key for this
	// phase of this request — the same on every attempt, different for
	// each scope, key and phase: send it to the provider as its
	// idempotency key, so that a phase cut short after its call and before
	// its record, and so run again, is not done twice. ctx ends when the
	// attempt's lease can no longer be trusted.
	Run func(ctx context.Context, forward string, done [][]byte) ([]byte, error)
}

// DefaultLeaseTTL is the lease a [RunPhases] attempt holds on its key,
// unless [WithLeaseTTL] says otherwise: a crashed attempt's key is free
// again this long after its last renewal, and a later attempt waits this
// long for it (longer than lease.DefaultTimeout, 5 s).
const DefaultLeaseTTL = 30 * time.Second

// ErrNotPhased: [RunPhases] found the key recorded by [Do] or the
// middleware. Nothing was run.
var ErrNotPhased = errors.New("idem: key recorded by another form than RunPhases")

// RunPhases runs phases in order, at most once each for (scope, key)
// across attempts, processes and crashes, and returns their outputs; once
// all are done, later calls return the recorded outputs without running
// anything.
//
// An attempt holds a lease on the key, taken from leases (a
// [lease.Manager] on the database of db) for [WithLeaseTTL], so that one
// attempt at a time works on it. It waits for the key for at least one
// lease TTL, bounded by ctx — longer than the Manager's own
// [lease.WithTimeout] when that is shorter — so that a retry after a
// crashed attempt (whose lease, of the same TTL, is free at most one TTL
// after its last renewal) finds the key free instead of timing out; give
// every attempt on a key the same [WithLeaseTTL]. It records each phase's completion (its output) in
// the keys table in a transaction of its own, guarded by the lease
// ([lease.Lease.Guard]): an attempt that lost its lease cannot record,
// and a completed — recorded — phase is never run again. A later attempt
// (after an error, or after the crashed attempt's lease expired) resumes
// at the first unrecorded phase. A phase cut short between its work and
// its record runs again: hence the forwarded key.
//
// A phase's error ends the attempt and is returned, wrapped with the
// phase's name; the phases before it stay recorded. A key recorded with a
// different fingerprint is [ErrKeyReused]; a key of [Do] or the
// middleware is [ErrNotPhased]. Keys expire after [WithRetention], as
// [Do]'s do: a key past it starts over.
func RunPhases[DB Handle](ctx context.Context, db DB, leases *lease.Manager, scope, key string, fingerprint []byte,
	phases []Phase, opts ...Option) ([][]byte, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	begin := beginner(db)
	if begin == nil || leases == nil {
		return nil, errkind.New(sqlock.ErrNilHandle, "idem: nil database handle or lease manager")
	}
	k := keyOf{scope: scope, key: key, fingerprint: fingerprint}
	if err := k.check(); err != nil {
		return nil, err
	}
	if err := checkPhases(phases); err != nil {
		return nil, err
	}
	id := k.id(c.table)
	l, err := acquireKey(ctx, leases, "idem:"+id, c.leaseTTL)
	if err != nil {
		return nil, fmt.Errorf("idem: taking the key's lease: %w", err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	lctx, cancel := l.Context(ctx)
	defer cancel()
	r := phaseRun{c: &c, st: buildStatements(c.table), begin: begin, l: l, k: k}
	done, finished, err := r.open(lctx)
	if err != nil || finished {
		return done, err
	}
	for i := len(done); i < len(phases); i++ {
		p := phases[i]
		out, err := p.Run(lctx, forwardKey(id, p.Name), done)
		if err != nil {
			return nil, fmt.Errorf("idem: phase %q: %w", p.Name, err)
		}
		if out == nil {
			out = []byte{}
		}
		if err := r.record(lctx, append(done, out), i == len(phases)-1); err != nil {
			return nil, fmt.Errorf("idem: recording phase %q: %w", p.Name, err)
		}
		done = append(done, out)
	}
	return done, nil
}

// acquireKey takes the key's lease, waiting for at least one lease TTL
// (bounded by ctx): time enough for the lease of a crashed attempt, which
// held it for the same TTL, to expire — whatever shorter bound the Manager
// sets on one Acquire (lease.DefaultTimeout, 5 s, against the default
// lease of 30 s: a retry after a crash used to time out long before the
// dead attempt's lease ran out). An Acquire that times out before one TTL
// has passed since the first began is tried again.
func acquireKey(ctx context.Context, leases *lease.Manager, name string, ttl time.Duration) (*lease.Lease, error) {
	until := time.Now().Add(ttl)
	for {
		l, err := leases.Acquire(ctx, name, ttl)
		if err == nil || !errors.Is(err, lease.ErrTimeout) || ctx.Err() != nil || !time.Now().Before(until) {
			return l, err
		}
	}
}

func checkPhases(phases []Phase) error {
	if len(phases) == 0 {
		return invalid("no phases")
	}
	seen := map[string]bool{}
	for _, p := range phases {
		if p.Run == nil {
			return errkind.New(sqlock.ErrNilHandle, "idem: phase %q has no Run function", p.Name)
		}
		if p.Name == "" || seen[p.Name] {
			return invalid("phase names must be non-empty and unique (%q)", p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

// id names a key in lease names and forwarded keys: a hash of table,
// scope and key, so that it is short and the same everywhere.
func (k keyOf) id(t tableName) string {
	h := sha256.Sum256([]byte(t.String() + "\x00" + k.scope + "\x00" + k.key))
	return hex.EncodeToString(h[:16])
}

func forwardKey(id, phase string) string {
	h := sha256.Sum256([]byte(id + "\x00" + phase))
	return hex.EncodeToString(h[:16])
}

// phaseRun is one attempt's state: its lease and its key.
type phaseRun struct {
	c     *config
	st    statements
	begin beginFunc
	l     *lease.Lease
	k     keyOf
}

// open creates or reads the key's row, in a guarded transaction: the
// outputs recorded so far, and whether all phases are done.
func (r phaseRun) open(ctx context.Context) (done [][]byte, finished bool, err error) {
	err = r.guarded(ctx, func(conn txConn) error {
		var fp, result, phases []byte
		var noResult, notPhased bool
		args := []any{r.k.scope, r.k.key, fpOrEmpty(r.k.fingerprint), r.c.retention.Microseconds()}
		if err := conn.queryRow(ctx, r.st.phaseOpen, args, &fp, &result, &noResult, &notPhased, &phases); err != nil {
			return err
		}
		switch {
		case notPhased:
			return ErrNotPhased
		case r.k.fingerprint != nil && !bytes.Equal(fp, r.k.fingerprint):
			return ErrKeyReused
		case !noResult:
			finished, phases = true, result
		}
		if len(phases) > 0 {
			return json.Unmarshal(phases, &done)
		}
		return nil
	})
	return done, finished, err
}

// record stores the outputs of the phases completed so far (and, after
// the last, the result) if the lease is still this attempt's.
func (r phaseRun) record(ctx context.Context, done [][]byte, last bool) error {
	data, err := json.Marshal(done)
	if err != nil {
		return err
	}
	var result []byte
	if last {
		result = data
	}
	return r.guarded(ctx, func(conn txConn) error {
		return conn.exec(ctx, r.st.phaseRecord, r.k.scope, r.k.key, data, result, r.c.retention.Microseconds())
	})
}

// guarded runs f in a transaction of its own that commits only while the
// lease is held.
func (r phaseRun) guarded(ctx context.Context, f func(txConn) error) error {
	conn, tx, commit, err := r.begin(ctx)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			conn.rollback(ctx)
		}
	}()
	if err := r.l.Guard(ctx, tx); err != nil {
		return err
	}
	if err := f(conn); err != nil {
		return err
	}
	committed = true
	return commit()
}

// beginFunc begins a transaction: the statement runner, the transaction
// itself (*sql.Tx or pgx.Tx) and its commit.
type beginFunc func(ctx context.Context) (conn txConn, tx any, commit func() error, err error)

func beginner[DB Handle](db DB) beginFunc {
	switch h := any(db).(type) {
	case *sql.DB:
		if h != nil {
			return func(ctx context.Context) (txConn, any, func() error, error) {
				tx, err := h.BeginTx(ctx, nil)
				if err != nil {
					return nil, nil, nil, err
				}
				return sqlTx{tx}, tx, tx.Commit, nil
			}
		}
	case *pgxpool.Pool:
		if h != nil {
			return func(ctx context.Context) (txConn, any, func() error, error) {
				tx, err := h.Begin(ctx)
				if err != nil {
					return nil, nil, nil, err
				}
				return pgxTx{tx}, tx, func() error { return tx.Commit(ctx) }, nil
			}
		}
	}
	return nil
}
