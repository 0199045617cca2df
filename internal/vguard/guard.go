// Package vguard decides the outcome of a versioned write: from the rows it
// affected to nil (one row), a stale version, a row fenced by a newer lock
// holder, a row that is gone, or a key that matched several rows. Package
// versioned, gormplugin and sqlxhelpers all decide it here, so that one
// result is one error (and one observer event) whichever of them ran the
// write.
package vguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/observe"
)

// Guard describes one versioned statement already run.
type Guard struct {
	Table    string // for the error and the observer
	Key      any    // for the error
	Expected int64  // the version the statement's WHERE clause expects
	Op       string // "update" (the default when empty) or "delete"

	// Observer, when not nil, is told of a stale result (observe.Stale)
	// with Source ("versioned" when empty) and System (the store's
	// db.system.name, "" when unknown).
	Observer observe.Observer
	Source   string
	System   string

	// Token is the fencing token of a fenced statement (0: unfenced).
	Token int64
	// Probe, when not nil, reads the row by key after a statement that
	// affected no row: its version and, for a fenced statement, its fence
	// (sql.ErrNoRows when there is no row). A row whose fence is past
	// Token is then a *vmodel.FencedError, not a stale version; otherwise
	// what it found fills in the *vmodel.StaleError. A fenced statement
	// is always probed: a fenced-out holder must not read its refusal as a
	// stale version and retry.
	Probe func(ctx context.Context) (version, fence sql.NullInt64, err error)
	// NullVersion, when not nil, is returned instead of the stale error
	// when the probe finds the row's version NULL (gormplugin's
	// NullRefused: the row must be repaired, not retried).
	NullVersion error
}

// Check turns the result of the guarded statement into an error: err itself
// when the statement failed, else what Outcome makes of the rows it
// affected. ctx is passed to the Probe and the Observer.
func (g Guard) Check(ctx context.Context, res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if res == nil {
		return vmodel.InputErr("check", "result", "nil sql.Result with a nil error", vmodel.ErrInvalidArg)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("versioned: %s %s: rows affected: %w", g.op(), g.Table, err)
	}
	return g.Outcome(ctx, n)
}

// Outcome turns n, the rows the statement affected, into its result: nil
// for one row, a *vmodel.RowsError for several, and for none a
// *vmodel.FencedError, the NullVersion error or a *vmodel.StaleError (the
// last reported to the Observer), as the Probe tells them apart.
func (g Guard) Outcome(ctx context.Context, n int64) error {
	switch {
	case n == 1:
		return nil
	case n > 1:
		return &vmodel.RowsError{Table: g.Table, Key: g.Key, Rows: n}
	}
	se := &vmodel.StaleError{Table: g.Table, Key: g.Key, Expected: g.Expected, Op: g.op()}
	if g.Probe != nil {
		if err := g.probe(ctx, se); err != nil {
			return err
		}
	}
	return g.stale(ctx, se)
}

// Gone is the outcome of a statement that shows by itself that the row is
// gone (gormplugin's upsert of a loaded struct that inserted it): a
// *vmodel.StaleError that says so, reported to the Observer.
func (g Guard) Gone(ctx context.Context) error {
	return g.stale(ctx, &vmodel.StaleError{Table: g.Table, Key: g.Key, Expected: g.Expected, Op: g.op(), Probed: true, Gone: true})
}

func (g Guard) op() string {
	if g.Op == "" {
		return "update"
	}
	return g.Op
}

func (g Guard) stale(ctx context.Context, se *vmodel.StaleError) error {
	if g.Observer != nil {
		src := g.Source
		if src == "" {
			src = "versioned"
		}
		g.Observer.Observe(ctx, observe.Event{Kind: observe.Stale, Source: src, System: g.System, Table: g.Table, Err: se})
	}
	return se
}

// probe tells a fenced-out row from a stale or missing one. The fence only
// grows, so a fence past the token now was past it when the statement ran
// or a newer holder has written since: either way the lock is lost.
func (g Guard) probe(ctx context.Context, se *vmodel.StaleError) error {
	ver, fence, err := g.Probe(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		se.Probed, se.Gone = true, true
	case err != nil:
		se.ProbeErr = err
	case g.Token > 0 && fence.Valid && fence.Int64 > g.Token:
		return &vmodel.FencedError{Table: g.Table, Key: g.Key, Op: se.Op, Token: g.Token, Current: fence.Int64}
	case !ver.Valid && g.NullVersion != nil:
		return g.NullVersion
	default:
		se.Probed, se.Current, se.CurrentNull = true, ver.Int64, !ver.Valid
	}
	return nil
}
