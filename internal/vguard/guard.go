// Package vguard checks the result of a versioned statement the adapters
// (sqlxhelpers' NamedExec and struct writes) build themselves, the way
// package versioned checks its own: zero rows affected is never silent.
package vguard

import (
	"context"
	"database/sql"
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
	if g.Observer != nil {
		g.Observer.Observe(ctx, observe.Event{Kind: observe.Stale, Source: "versioned", Table: g.Table, Err: se})
	}
	return se
}
