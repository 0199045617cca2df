package versioned

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlock/sqlock/observe"
)

// Guard describes a hand-written versioned statement, so that its result
// can be checked like Update's and Delete's:
//
//	res, err := db.ExecContext(ctx,
//		`UPDATE accounts SET balance = balance - $1, version = version + 1
//		  WHERE id = $2 AND version = $3`, amount, id, v)
//	err = versioned.Check(res, err, versioned.Guard{Table: "accounts", Key: id, Expected: v})
//
// or in one line, Guard{…}.Check(db.ExecContext(…)).
type Guard struct {
	Table    string // for the error and the observer
	Key      any    // for the error
	Expected int64  // the version the statement's WHERE clause expects
	Op       Op     // OpUpdate (the default when zero) or OpDelete

	// Observer, when not nil, is told of a stale result (observe.Stale).
	Observer observe.Observer
}

// Check is g.Check(res, err).
func Check(res sql.Result, err error, g Guard) error { return g.Check(res, err) }

// Check turns the result of the guarded statement into an error: err itself
// when the statement failed, nil when it affected exactly one row, a
// *StaleError (errors.Is(err, ErrStale)) when it affected none, and a
// *RowsError when it affected several. Zero rows is never silent.
func (g Guard) Check(res sql.Result, err error) error {
	return g.CheckContext(context.Background(), res, err)
}

// CheckContext is Check, passing ctx to the Observer.
func (g Guard) CheckContext(ctx context.Context, res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if res == nil {
		return inputErr("check", "result", "nil sql.Result with a nil error", ErrInvalidArg)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("versioned: check %s: rows affected: %w", g.Table, err)
	}
	switch {
	case n == 1:
		return nil
	case n > 1:
		return &RowsError{Table: g.Table, Key: g.Key, Rows: n}
	}
	op := g.Op
	if op == 0 {
		op = OpUpdate
	}
	se := &StaleError{Table: g.Table, Key: g.Key, Expected: g.Expected, Op: op}
	if g.Observer != nil {
		g.Observer.Observe(ctx, observe.Event{Kind: observe.Stale, Source: "versioned", Table: g.Table, Err: se})
	}
	return se
}
