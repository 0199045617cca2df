package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"unicode/utf8"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

var (
	// ErrKeyReused: the key is recorded for a request with a different
	// fingerprint. Nothing was executed. The middleware answers 422.
	ErrKeyReused = errors.New("idem: idempotency key reused with a different request")

	// ErrInvalidKey: an empty, over-long ([MaxKeyBytes]) or non-UTF-8 key
	// or scope, or one holding a NUL byte. Nothing was sent. It matches
	// [sqlock.ErrInvalidArgument] too.
	ErrInvalidKey = errkind.New(sqlock.ErrInvalidArgument, "idem: invalid idempotency key")

	// ErrPhased: [Do], [DoTx] or [Middleware] (422) found the key recorded
	// by [RunPhases] — its phases running or done. Nothing was executed.
	// It is the other side of [ErrNotPhased]: a key belongs to one form.
	ErrPhased = errors.New("idem: key recorded by RunPhases")

	// errBusy: the key's first request is still in progress and the caller
	// asked not to wait (the middleware's 409).
	errBusy = errors.New("idem: key in use by a request in progress")

	// errNoResult: a committed key without a result: its transaction was
	// committed although fn had failed.
	errNoResult = errors.New("idem: key recorded without a result (its transaction committed after fn failed)")
)

// Codec turns [Do]'s results into the bytes stored with the key and back.
// It must be safe for concurrent use.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the default [Codec], encoding/json.
type JSON struct{}

// Marshal is json.Marshal.
func (JSON) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal is json.Unmarshal.
func (JSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Do runs fn at most once for (scope, key), in the caller's transaction tx
// (a *sql.Tx — sqlx's tx.Tx, GORM's db.Statement.ConnPool — or a pgx.Tx),
// and returns its result; a later call with the same scope and key replays
// the stored result without running fn.
//
// Do claims the key in the keys table (see [Migrate]) in tx, runs fn,
// and stores fn's result, encoded by the [Codec] ([JSON] unless
// [WithCodec]), in tx: if tx commits, the key, its result and fn's writes
// in tx exist together; if it rolls back, none does. Put every effect that
// must happen once inside fn: what the caller does in tx around Do runs on
// replays too.
//
// A call whose key is held by a transaction still in progress waits for it
// (the table's unique index queues it; bound the wait with ctx): if that
// transaction commits, the call replays its result; if it rolls back, the
// call claims the key and runs fn. A key recorded with a different
// fingerprint (a hash of the request, or nil to skip the check) is
// [ErrKeyReused], and a key of [RunPhases] (its phases running or done) is
// [ErrPhased]; fn does not run. A key older than [WithRetention] counts as
// new.
//
// An error from fn is returned as it is and not stored: the caller rolls
// back and a retry runs fn again (Do also removes the claim, so a commit
// after it records nothing). If fn panics, Do rolls tx back itself and
// re-raises the panic: the key is not left claimed even if a caller
// recovers and commits (that commit then fails, the transaction being
// done).
//
// Cost: a replay is one round trip (two if it waited for the key's first
// transaction); a first execution is one statement to claim and one to
// store the result, both in tx. [DoTx], which begins and commits the
// transaction itself, sends them with BEGIN and COMMIT instead. Under REPEATABLE READ or SERIALIZABLE, a
// key committed after tx's snapshot fails the claim with a serialization
// error (SQLSTATE 40001): retry the whole transaction, and the retry
// replays.
func Do[T any](ctx context.Context, tx any, scope, key string, fingerprint []byte,
	fn func(ctx context.Context) (T, error), opts ...Option) (T, error) {
	var zero T
	c, err := buildConfig(opts)
	if err != nil {
		return zero, err
	}
	if fn == nil {
		return zero, errkind.New(sqlock.ErrNilHandle, "idem: nil function")
	}
	conn, err := newTxConn(tx)
	if err != nil {
		return zero, err
	}
	k := keyOf{scope: scope, key: key, fingerprint: fingerprint}
	if err := k.check(); err != nil {
		return zero, err
	}
	st := buildStatements(c.table)
	cl, err := claim(ctx, conn, st, &c, k, false, nil)
	if err != nil {
		return zero, err
	}
	if cl.replay {
		return decode[T](c.codec, cl.result)
	}
	v, err := run(ctx, conn, fn)
	if err != nil {
		// Best effort: if tx is still usable, a commit now records nothing.
		_ = conn.exec(ctx, st.unclaim, k.scope, k.key)
		return zero, err
	}
	data, err := c.codec.Marshal(v)
	if err != nil {
		return zero, fmt.Errorf("idem: encoding the result: %w", err)
	}
	if err := conn.exec(ctx, st.store, k.scope, k.key, data); err != nil {
		return zero, wrapDB("store result", err)
	}
	return v, nil
}

// run calls fn, rolling tx back before re-raising a panic.
func run[T any](ctx context.Context, conn txConn, fn func(context.Context) (T, error)) (v T, err error) {
	done := false
	defer func() {
		if !done {
			conn.rollback(ctx)
		}
	}()
	v, err = fn(ctx)
	done = true
	return v, err
}

// keyOf is one request's identity.
type keyOf struct {
	scope, key  string
	fingerprint []byte
}

func (k keyOf) check() error {
	if err := checkText("key", k.key, 1); err != nil {
		return err
	}
	return checkText("scope", k.scope, 0)
}

func checkText(what, s string, minLen int) error {
	if len(s) < minLen || len(s) > MaxKeyBytes || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s of %d bytes (want %d to %d bytes of UTF-8 without NUL)", ErrInvalidKey, what, len(s), minLen, MaxKeyBytes)
	}
	return nil
}

// lockKey is the transaction advisory lock the middleware holds on a key
// while its handler runs (an FNV-1a hash of table, scope and key).
func (k keyOf) lockKey(t tableName) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "sqlock idem\x00%s\x00%s\x00", t, k.scope)
	h.Write([]byte(k.key))
	return int64(h.Sum64())
}

// claimed is what a claim found: the key is this transaction's to execute,
// or a result to replay.
type claimed struct {
	replay bool
	result []byte
}

// maxClaimRounds bounds the claim loop: each extra round follows a
// concurrent change to the key's row (an expired row deleted, a waited-for
// row gone), which cannot repeat without bound except under a sweeper
// racing every claim.
const maxClaimRounds = 8

// claimStmt is the claim statement for k, its form sent ahead of BEGIN
// (see claimAheadQueue) and their arguments. noWait: a key
// held by a middleware request in progress is errBusy.
func claimStmt(st statements, c *config, k keyOf, noWait bool) (q, ahead string, args []any) {
	args = []any{k.scope, k.key, fpOrEmpty(k.fingerprint), c.retention.Microseconds()}
	if noWait {
		return st.claimTry, st.claimTryAhead, append(args, k.lockKey(c.table))
	}
	return st.claim, st.claimAhead, args
}

// claimRow is the claim statement's answer.
type claimRow struct {
	inserted, got, found, noResult, expired bool
	fp, result                              []byte
	phased                                  bool // recorded by RunPhases
	answered                                bool // recorded: BEGIN stopped (claimAheadQueue)
}

func (r *claimRow) dest() []any {
	return []any{&r.inserted, &r.got, &r.found, &r.fp, &r.result, &r.noResult, &r.expired, &r.phased}
}

// claim claims k in conn's transaction or finds its recorded result.
// noWait: a key held by a middleware request in progress is errBusy.
// first, if not nil, is the claim statement's answer when it was already
// sent (with BEGIN).
func claim(ctx context.Context, conn txConn, st statements, c *config, k keyOf, noWait bool, first *claimRow) (claimed, error) {
	q, _, args := claimStmt(st, c, k, noWait)
	for range maxClaimRounds {
		var r claimRow
		if first != nil {
			r, first = *first, nil
		} else if err := conn.queryRow(ctx, q, args, r.dest()...); err != nil {
			return claimed{}, wrapDB("claim", err)
		}
		switch {
		case r.inserted:
			return claimed{}, nil
		case !r.got:
			return claimed{}, errBusy
		case !r.found:
			// Waited for a transaction that then committed the key after
			// this statement's snapshot: read it with a new one.
			err := conn.queryRow(ctx, st.read, args[:2], r.dest()...)
			if errors.Is(err, errNoRows) {
				continue // deleted meanwhile (expired and swept): claim again
			}
			if err != nil {
				return claimed{}, wrapDB("read key", err)
			}
		}
		if r.expired {
			if err := conn.exec(ctx, st.drop, k.scope, k.key); err != nil {
				return claimed{}, wrapDB("drop expired key", err)
			}
			continue
		}
		return r.settle(k)
	}
	return claimed{}, fmt.Errorf("idem: claim of key %q did not settle after %d rounds", k.key, maxClaimRounds)
}

// settle is what a row of k recorded by another request means: a replay,
// ErrKeyReused for another fingerprint, or ErrPhased for a key of
// RunPhases (whose row holds its phases, not a result of this form).
func (r *claimRow) settle(k keyOf) (claimed, error) {
	if r.phased {
		return claimed{}, ErrPhased
	}
	if k.fingerprint != nil && !bytes.Equal(r.fp, k.fingerprint) {
		return claimed{}, ErrKeyReused
	}
	if r.noResult {
		return claimed{}, errNoResult
	}
	return claimed{replay: true, result: r.result}, nil
}

// fpOrEmpty stores a nil fingerprint as empty bytes (the column is NOT
// NULL, and NULL is how the claim statement says "no visible row").
func fpOrEmpty(fp []byte) []byte {
	if fp == nil {
		return []byte{}
	}
	return fp
}

// decode is a replay's result: the stored bytes read by codec.
func decode[T any](codec Codec, b []byte) (T, error) {
	var v T
	if err := codec.Unmarshal(b, &v); err != nil {
		var zero T // not what a failed decoding left half-filled
		return zero, fmt.Errorf("idem: decoding the stored result: %w", err)
	}
	return v, nil
}
