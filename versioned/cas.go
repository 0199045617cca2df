package versioned

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/nilcheck"
)

// CASResult is the outcome of a compare-and-swap. Losing the race is an
// ordinary result, not an error.
type CASResult uint8

const (
	// Won: the row matched every expected value and now holds the new
	// ones.
	Won CASResult = iota + 1
	// Lost: the row exists but did not match (someone else swapped first).
	Lost
	// Missing: no row has the key.
	Missing
)

func (r CASResult) String() string {
	switch r {
	case Won:
		return "won"
	case Lost:
		return "lost"
	case Missing:
		return "missing"
	}
	return "invalid"
}

// CompareAndSwap sets the columns of set on the row with key, if and only
// if every column of expect still holds its expected value:
//
//	UPDATE tasks SET status = $1, worker_id = $2 WHERE id = $3 AND status = $4
//
// It returns Won, Lost (the row is there but did not match) or Missing (no
// row has the key), with a nil error; an error means the outcome is not
// known (the statement failed) or nothing was sent (bad input: a nil
// handle, a missing key, no expectation, no assignment, a duplicate or
// invalid column).
//
// An expected value that is nil, a nil pointer or a driver.Valuer yielding
// NULL compares with IS NULL, so "claim if unowned" (Eq("worker_id", nil))
// works. On Postgres the swap and the existence check are one statement
// (a data-modifying WITH), so the answer costs one round trip and comes
// from one snapshot. MySQL and SQLite have no such statement: there a
// second query, by key only, runs after a swap that changed nothing. On
// MySQL it is a locking read of the newest row, which also tells a swap to
// the values the row already has (Won, on any DSN) from a lost one; see
// [MySQL].
func CompareAndSwap(ctx context.Context, db DB, t *Table, key any, expect []Pair, set ...Pair) (CASResult, error) {
	const op = "compare-and-swap"
	if t == nil {
		return 0, inputErr(op, "table", "nil *Table", ErrInvalidArg)
	}
	if nilcheck.Is(db) {
		return 0, inputErr(op, "db", "nil database handle", sqlock.ErrNilHandle)
	}
	if len(expect) == 0 {
		return 0, inputErr(op, "expect", "no expected value: a swap without a compare is a plain UPDATE", ErrInvalidArg)
	}
	if len(set) == 0 {
		return 0, inputErr(op, "set", "nothing to set", ErrInvalidArg)
	}
	if err := checkPairs(op, "set column", set); err != nil {
		return 0, err
	}
	if err := checkPairs(op, "expect column", expect); err != nil {
		return 0, err
	}
	args := make([]any, len(set), len(set)+len(t.qKeys)+len(expect))
	for i, p := range set {
		args[i] = p.Value
	}
	var err error
	if args, err = t.appendKey(args, key); err != nil {
		return 0, err
	}
	pg := t.cfg.dialect == Postgres
	b := sqlBuf{d: t.cfg.dialect}
	if pg {
		b.str("WITH ")
		b.str(t.cte)
		b.str(" AS (")
	}
	b.str("UPDATE ")
	b.str(t.qTable)
	b.str(" SET ")
	for i, p := range set {
		if i > 0 {
			b.str(", ")
		}
		b.d.writeQuoted(&b.b, p.Column)
		b.str(" = ")
		b.param()
	}
	firstKey := b.n + 1
	t.whereKey(&b)
	args = b.expect(args, expect, true)
	if !pg {
		return t.casTwoStep(ctx, db, b.b.String(), args, key, expect, set)
	}
	b.str(" RETURNING 1) SELECT (SELECT count(*) FROM ")
	b.str(t.cte)
	b.str("), EXISTS (SELECT 1 FROM ")
	b.str(t.qTable)
	next := firstKey // the key's placeholders again, not fresh ones
	t.stmt().WhereKey(&b.b, func(*strings.Builder) { b.paramAt(next); next++ })
	b.str(")")
	var n int64
	var exists bool
	if err := db.QueryRowContext(ctx, b.b.String(), args...).Scan(&n, &exists); err != nil {
		return 0, fmt.Errorf("versioned: compare-and-swap on %s: %w", t.name, err)
	}
	return t.casResult(n, exists, key)
}

func (t *Table) casTwoStep(ctx context.Context, db DB, query string, args []any, key any, expect, set []Pair) (CASResult, error) {
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("versioned: compare-and-swap on %s: %w", t.name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("versioned: compare-and-swap on %s: rows affected: %w", t.name, err)
	}
	if n != 0 {
		return t.casResult(n, true, key)
	}
	keyArgs, _ := t.appendKey(make([]any, 0, len(t.qKeys)), key) // checked above
	if t.cfg.dialect == MySQL {
		return t.casRecheck(ctx, db, keyArgs, key, expect, set)
	}
	var one int
	switch err := db.QueryRowContext(ctx, t.existsSQL, keyArgs...).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return Missing, nil
	case err != nil:
		return 0, fmt.Errorf("versioned: compare-and-swap on %s: existence check: %w", t.name, err)
	}
	return Lost, nil
}

// casRecheck decides a MySQL swap that reported no row affected. MySQL
// counts a matched row whose values did not change as unaffected (unless
// the DSN sets clientFoundRows=true), so zero means the row is missing, did
// not match, or matched and already held the new values. One locking read
// of the newest row tells them apart:
//
//	SELECT (s = ? AND … AND c <=> ? AND …) FROM t WHERE k = ? FOR UPDATE
//
// A row that matches the expectation and holds the new values is Won: the
// swap takes effect at that read, where setting the values changes
// nothing. Any other row is Lost, no row Missing.
func (t *Table) casRecheck(ctx context.Context, db DB, keyArgs []any, key any, expect, set []Pair) (CASResult, error) {
	b := sqlBuf{d: t.cfg.dialect}
	args := make([]any, 0, len(expect)+len(set)+len(keyArgs))
	b.str("SELECT (")
	args = b.expect(args, expect, false)
	for _, p := range set {
		b.str(" AND ")
		b.d.writeQuoted(&b.b, p.Column)
		b.str(" <=> ") // NULL-safe: a column set to NULL that is NULL
		b.param()
		args = append(args, p.Value)
	}
	b.str(") FROM ")
	b.str(t.qTable)
	t.whereKey(&b)
	b.str(t.cfg.dialect.lockingRead())
	args = append(args, keyArgs...)
	var match sql.NullInt64
	switch err := db.QueryRowContext(ctx, b.b.String(), args...).Scan(&match); {
	case errors.Is(err, sql.ErrNoRows):
		return Missing, nil
	case err != nil:
		return 0, fmt.Errorf("versioned: compare-and-swap on %s: recheck: %w", t.name, err)
	case match.Valid && match.Int64 == 1:
		return Won, nil
	}
	return Lost, nil
}

// expect writes the swap's expectations joined by AND (with a leading AND
// when lead is set): c = ? for a value, c IS NULL for a value the driver
// sends as NULL. It returns args with the values it bound appended.
func (b *sqlBuf) expect(args []any, expect []Pair, lead bool) []any {
	for i, p := range expect {
		if lead || i > 0 {
			b.str(" AND ")
		}
		b.d.writeQuoted(&b.b, p.Column)
		if isNull(p.Value) {
			b.str(" IS NULL")
			continue
		}
		b.str(" = ")
		b.param()
		args = append(args, p.Value)
	}
	return args
}

func (t *Table) casResult(n int64, exists bool, key any) (CASResult, error) {
	switch {
	case n == 1:
		return Won, nil
	case n > 1:
		return 0, &RowsError{Table: t.name, Key: key, Rows: n}
	case exists:
		return Lost, nil
	}
	return Missing, nil
}

func checkPairs(op, arg string, ps []Pair) error {
	for i, p := range ps {
		if err := checkIdent(op, arg, p.Column); err != nil {
			return err
		}
		for _, prev := range ps[:i] {
			if prev.Column == p.Column {
				return inputErr(op, arg, fmt.Sprintf("%q named twice", p.Column), ErrInvalidArg)
			}
		}
	}
	return nil
}

// isNull reports a value the driver would send as NULL.
func isNull(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if rv.IsNil() {
			// A nil []byte is an empty value to most drivers, but
			// database/sql sends it as NULL.
			return true
		}
	}
	if vr, ok := v.(driver.Valuer); ok {
		dv, err := vr.Value()
		return err == nil && dv == nil
	}
	if rv.Kind() == reflect.Pointer {
		return isNull(rv.Elem().Interface())
	}
	return false
}
