package idem

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

// DoTx is [Do] in a transaction DoTx begins on db and commits: it runs fn
// at most once for (scope, key), in that transaction, and returns fn's
// result; a later call with the same scope and key replays it without
// running fn. tx is a pgx.Tx for a pgx handle (*pgxpool.Pool,
// *pgxpool.Conn, *pgx.Conn) and a *sql.Tx for a database/sql one (*sql.DB,
// *sql.Conn); another type is an error matching [sqlock.ErrUnsupported],
// and nothing is sent. fn must neither commit nor roll tx back, nor use it
// after returning.
//
// Because DoTx begins and ends the transaction, the key costs no round
// trip of its own: the claim travels with BEGIN and the stored result
// with COMMIT, as one batch each — on pgx, and on a *sql.DB opened with
// txlock.OpenDB (or txlock.WrapConnector). An idempotent transaction then
// costs the round trips of the same transaction without idem. A replay
// costs one: the claim goes ahead of BEGIN, in the same batch, and for a
// recorded key returns its result and makes BEGIN fail, so that no
// transaction is left to end. On other database/sql drivers
// the claim and the store are statements of their own, as in Do, and a
// replay costs three (BEGIN, claim, ROLLBACK).
//
// The result is stored in COMMIT's pipeline: if storing it fails, the
// server skips the COMMIT and the transaction rolls back — the key and
// fn's writes exist together or not at all. An error from fn, or a panic
// (re-raised), rolls back. A COMMIT whose outcome is unknown (the
// connection lost) is an error matching txlock.ErrAmbiguousCommit:
// retrying with the same key is safe, and either replays or runs fn again.
//
// Waits, fingerprints, retention and the codec are as in [Do].
func DoTx[T, Tx any, DB interface {
	*sql.DB | *sql.Conn | *pgxpool.Pool | *pgxpool.Conn | *pgx.Conn
}](ctx context.Context, db DB, scope, key string, fingerprint []byte,
	fn func(ctx context.Context, tx Tx) (T, error), opts ...Option) (T, error) {
	var zero T
	c, err := buildConfig(opts)
	if err != nil {
		return zero, err
	}
	if fn == nil {
		return zero, errkind.New(sqlock.ErrNilHandle, "idem: nil function")
	}
	open := opener(db)
	if open == nil {
		return zero, errkind.New(sqlock.ErrNilHandle, "idem: nil database handle")
	}
	if err := checkTxType[Tx](db); err != nil {
		return zero, err
	}
	k := keyOf{scope: scope, key: key, fingerprint: fingerprint}
	if err := k.check(); err != nil {
		return zero, err
	}
	st := buildStatements(c.table)
	o, cl, err := openClaimed(ctx, open, st, &c, k, false)
	if err != nil {
		return zero, err
	}
	if cl.replay {
		return decode[T](c.codec, cl.result)
	}
	ended := false
	defer func() {
		if !ended { // an error or a panic in fn (re-raised)
			_ = o.end(ctx, false, "")
		}
	}()
	v, err := fn(ctx, o.tx.(Tx))
	if err != nil {
		return zero, err
	}
	data, err := c.codec.Marshal(v)
	if err != nil {
		return zero, fmt.Errorf("idem: encoding the result: %w", err)
	}
	ended = true
	if err := o.end(ctx, true, st.store, k.scope, k.key, data); err != nil {
		return zero, wrapDB("store result and commit", err)
	}
	return v, nil
}

// checkTxType refuses a transaction type fn cannot be given on db.
func checkTxType[Tx any](db any) error {
	var tx Tx
	var ok bool
	want := reflect.TypeFor[Tx]()
	switch db.(type) {
	case *sql.DB, *sql.Conn:
		_, ok = any(&tx).(**sql.Tx)
	default:
		_, ok = any(&tx).(*pgx.Tx)
	}
	if !ok {
		return errkind.New(sqlock.ErrUnsupported, "idem: DoTx on a %T gives fn a %s, not a %v", db, txTypeOf(db), want)
	}
	return nil
}

func txTypeOf(db any) string {
	switch db.(type) {
	case *sql.DB, *sql.Conn:
		return "*sql.Tx"
	}
	return "pgx.Tx"
}
