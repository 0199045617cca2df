package sqlxhelpers

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

// Beginner begins sqlx transactions: *sqlx.DB and *sqlx.Conn.
type Beginner interface {
	BeginTxx(ctx context.Context, opts *sql.TxOptions) (*sqlx.Tx, error)
}

// Do runs fn in a transaction that holds pg_advisory_xact_lock on key (and
// on the keys of txlock.AlsoLock, all in txlock's canonical order) from
// before fn's first statement until COMMIT or ROLLBACK, with package
// txlock's semantics, as txlock.Do: the wait is bounded (txlock.WithTimeout;
// a wait that runs out is an error matching txlock.ErrTimeout and fn does
// not run), the whole transaction — fn included — is retried on
// serialization failures, deadlocks and stale versioned writes, a COMMIT
// whose outcome is unknown is an error matching txlock.ErrAmbiguousCommit
// and is never retried, and fn's own error rolls back and is returned as it
// is. fn must be safe to run more than once: re-read inside it what it
// depends on. A nil db or fn is an error matching sqlock.ErrNilHandle.
//
// Inside fn, a locked transaction or an advisory lock on a key fn holds,
// asked for with fn's context through the same *sql.DB, would wait for its
// own caller; it is refused at once with an error matching
// txlock.ErrAlreadyHeld (advisory.ErrAlreadyHeld for an advisory lock).
//
// db is a *sqlx.DB or a *sqlx.Conn. On a *sqlx.DB whose *sql.DB was opened
// by txlock.OpenDB, BEGIN carries the lock and the transaction costs no
// extra round trip.
func Do(ctx context.Context, db Beginner, key advisory.Key, fn func(ctx context.Context, tx *sqlx.Tx) error, opts ...txlock.Option) error {
	if isNil(db) {
		return lockedtx.ErrNilDB
	}
	if fn == nil {
		return lockedtx.ErrNilFunc
	}
	// The *sql.DB (or *sql.Conn) names the database for txlock's check
	// against waiting on one's own locks, as txlock.Do on it would.
	var pool any
	switch d := db.(type) {
	case *sqlx.DB:
		pool = d.DB
	case *sqlx.Conn:
		pool = d.Conn
	}
	return lockedtx.Run(ctx, pool, key, func(ctx context.Context, a *lockedtx.Attempt) (*sqlx.Tx, lockedtx.Tx, bool, error) {
		// The attempt's statements run on a known connection where it
		// can: a cancellation's cancel requests go to its backend (see
		// lockedtx.Attempt.NeedsConn).
		var c *sql.Conn
		begin := db.BeginTxx
		switch d := db.(type) {
		case *sqlx.DB:
			if a.NeedsConn(d.DB) {
				pinned, err := d.Connx(a.Context())
				if err != nil {
					return nil, nil, false, err
				}
				if err := a.RunsOn(pinned.Conn); err != nil {
					pinned.Close()
					return nil, nil, false, err
				}
				c, begin = pinned.Conn, pinned.BeginTxx
			}
		case *sqlx.Conn:
			if a.Context().Done() == nil {
				break
			}
			if err := a.RunsOn(d.Conn); err != nil {
				return nil, nil, false, err
			}
		}
		tx, folded, err := lockedtx.BeginSQL(ctx, a, begin)
		if err != nil {
			a.Unpin(c)
			return nil, nil, false, err
		}
		return tx, a.ConnTx(tx.Tx, c), folded, nil
	}, fn, opts)
}

// Do is the package-level Do on h's handle (its *sqlx.DB, or the
// *sqlx.Conn given to On). Inside fn, h.On(tx) runs the versioned helpers
// in the transaction; a stale write there retries the whole transaction.
func (h *Helper) Do(ctx context.Context, key advisory.Key, fn func(ctx context.Context, tx *sqlx.Tx) error, opts ...txlock.Option) error {
	if isNil(h.ex) {
		return lockedtx.ErrNilDB
	}
	b, ok := h.ex.(Beginner)
	if !ok {
		return &versioned.InputError{Op: "transaction", Arg: "db",
			Reason: fmt.Sprintf("%T cannot begin a transaction (use a *sqlx.DB or *sqlx.Conn)", h.ex), Kind: versioned.ErrInvalidArg}
	}
	return Do(ctx, b, key, fn, opts...)
}
