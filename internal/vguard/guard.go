// Package vguard checks the result of a versioned statement the adapters
// (sqlxhelpers' NamedExec and struct writes) build themselves, the way
// package versioned checks its own: zero rows affected is never silent.
package vguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/versioned"
)

// Guard describes one versioned statement already run.
type Guard struct {
	Table    string // for the error and the observer
	Key      any    // for the error
	Expected int64  // the version the statement's WHERE clause expects
	Op       string // "update" (the default when empty) or "delete"

	// Observer, when not nil, is told of a stale result (observe.Stale).
	Observer observe.Observer

	// Token is the fencing token of a fenced statement (0: unfenced).
	// When a fenced statement affects no row, Probe reads the row's
	// version and fence by key (sql.ErrNoRows when there is no row), so
	// that a row a newer holder wrote is a *versioned.FencedError, not a
	// stale version.
	Token int64
	Probe func(ctx context.Context) (version, fence sql.NullInt64, err error)
}

// Check turns the result of the guarded statement into an error: err itself
// when the statement failed, nil when it affected exactly one row, a
// *versioned.StaleError when it affected none, and a *versioned.RowsError
// when it affected several. ctx is passed to the Observer.
func (g Guard) Check(ctx context.Context, res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if res == nil {
		return vmodel.InputErr("check", "result", "nil sql.Result with a nil error", versioned.ErrInvalidArg)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("versioned: check %s: rows affected: %w", g.Table, err)
	}
	switch {
	case n == 1:
		return nil
	case n > 1:
		return &versioned.RowsError{Table: g.Table, Key: g.Key, Rows: n}
	}
	op := g.Op
	if op == "" {
		op = "update"
	}
	se := &versioned.StaleError{Table: g.Table, Key: g.Key, Expected: g.Expected, Op: op}
	if g.Token > 0 && g.Probe != nil {
		if fe := g.probe(ctx, se); fe != nil {
			return fe
		}
	}
	if g.Observer != nil {
		g.Observer.Observe(ctx, observe.Event{Kind: observe.Stale, Source: "versioned", Table: g.Table, Err: se})
	}
	return se
}

// probe tells a fenced-out row from a stale or missing one. The fence only
// grows, so a fence past the token now was past it when the statement ran
// or a newer holder has written since: either way the lock is lost.
func (g Guard) probe(ctx context.Context, se *versioned.StaleError) error {
	ver, fence, err := g.Probe(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		se.Probed, se.Gone = true, true
	case err != nil:
		se.ProbeErr = err
	case fence.Valid && fence.Int64 > g.Token:
		return &versioned.FencedError{Table: g.Table, Key: g.Key, Op: se.Op, Token: g.Token, Current: fence.Int64}
	default:
		se.Probed, se.Current, se.CurrentNull = true, ver.Int64, !ver.Valid
	}
	return nil
}
