package versioned

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/vmodel"
)

// UpdateStruct is Update for a struct with a lock:"version" field: the key
// comes from the struct's key fields (fields tagged lock:"key", or else the one field whose column is id), the expected
// version from its version field, the assignments from set. On success the
// struct follows the row: each assigned value is stored in the field of its
// column, and the new version in the version field (Set("status", "paid")
// leaves Status == "paid"); on any error the struct is unchanged. The
// Table's column names are the ones used in SQL.
//
// Assignments are matched to fields by column name, as key fields are. A
// Set on a column no field maps to, or a value its field cannot hold
// exactly (an int64 of 300 for an int8, 1.5 for an int, a string for an
// int), is refused with *[InputError] ([ErrInvalidArg]) before anything is
// sent. A value converts when its type is assignable to the field's, when
// the field is a pointer to such a type or a sql.Scanner (sql.NullString
// from a string, nil), when it is a number the field holds without loss,
// or the same kind under another name (a string for type Status string).
// The field holds the value sent; what the column makes of it (a timestamp
// rounded to microseconds, a trigger) is the database's.
//
// Key fields are matched to the Table's key columns by column name (a
// field's lock column=, else its db tag, else its name in snake_case: UserID → user_id),
// never by position. A struct that has no key field for one of the Table's
// key columns, a key field whose column is not a key column of the Table,
// or two key fields for one column is refused with *[KeyError]
// ([ErrNoKey]) naming that column, and nothing is sent.
//
// A struct with a lock:"fence" field is written fenced (see [Fence]) with
// the fencing token the context carries ([sqlock.WithFencingToken]), on
// the field's column (lock column=, else its db tag, else snake_case): a
// row a newer lock holder has written is refused with *[FencedError]
// ([ErrFenced]), and on success the field holds the token. With no token
// in the context the write is refused (*[InputError], [ErrInvalidArg]) and
// nothing is sent: a fence is never silently skipped.
func UpdateStruct(ctx context.Context, db DB, t *Table, ptr any, set ...Pair) error {
	m, rv, err := modelFor("update", ptr)
	if err != nil {
		return err
	}
	exp, err := m.Version.Get(rv)
	if err != nil {
		return err
	}
	if _, err := m.Version.Next(exp); err != nil {
		return err
	}
	if t == nil {
		return inputErr("update", "table", "nil *Table", ErrInvalidArg)
	}
	key, err := keyFor(m, rv, t)
	if err != nil {
		return err
	}
	set, f, err := splitFence("update", set)
	if err != nil {
		return err
	}
	follow, err := assignments(m, t, set)
	if err != nil {
		return err
	}
	if m.Fence != nil {
		if f.on {
			return inputErr("update", "fence", m.Type.String()+` has a lock:"fence" field: its token comes from the context, not a Fence argument`, ErrInvalidArg)
		}
		if f, err = structFence(ctx, "update", m); err != nil {
			return err
		}
	}
	n, err := t.update(ctx, db, key, exp, set, f)
	if err != nil {
		return err
	}
	if f.on && m.Fence != nil {
		if err := m.Fence.Set(rv, f.token); err != nil {
			return err
		}
	}
	if err := m.Version.Set(rv, n); err != nil {
		return err
	}
	for _, a := range follow {
		a.Store(rv)
	}
	return nil
}

// assignments converts set's values for the struct's fields, before
// anything is sent. The version column and a fence column are left to
// the write, which refuses them.
func assignments(m *vmodel.Model, t *Table, set []Pair) ([]vmodel.Assignment, error) {
	if len(set) == 0 {
		return nil, nil
	}
	follow := make([]vmodel.Assignment, 0, len(set))
	for _, p := range set {
		if p.Column == t.cfg.version || m.Fence != nil && p.Column == m.Fence.Column {
			continue
		}
		a, err := m.Assignment("update", p.Column, p.Value)
		if err != nil {
			return nil, err
		}
		follow = append(follow, a)
	}
	return follow, nil
}

// structFence returns the fence of a struct write: m's fence column and
// the context's token, refusing a missing token or one the field cannot
// hold before anything is sent.
func structFence(ctx context.Context, op string, m *vmodel.Model) (fence, error) {
	tok, ok := sqlock.FencingToken(ctx)
	if !ok {
		return fence{}, inputErr(op, "fence", "no fencing token in the context: "+m.Type.String()+
			` has a lock:"fence" field, so it is written only under a lock (ctx = sqlock.WithFencingToken(ctx, token))`, ErrInvalidArg)
	}
	if tok > m.Fence.Max {
		return fence{}, &OverflowError{Type: m.Fence.Type.String(), Value: strconv.FormatInt(tok, 10), Min: m.Fence.Min, Max: m.Fence.Max}
	}
	return fence{column: m.Fence.Column, token: tok, on: true}, nil
}

// DeleteStruct is Delete for a struct with a lock:"version" field, by the
// struct's key and version. Key fields are matched to the Table's key
// columns by name, and a lock:"fence" field makes it a fenced delete with
// the context's token, as for [UpdateStruct].
func DeleteStruct(ctx context.Context, db DB, t *Table, ptr any) error {
	m, rv, err := modelFor("delete", ptr)
	if err != nil {
		return err
	}
	exp, err := m.Version.Get(rv)
	if err != nil {
		return err
	}
	if t == nil {
		return inputErr("delete", "table", "nil *Table", ErrInvalidArg)
	}
	key, err := keyFor(m, rv, t)
	if err != nil {
		return err
	}
	var f fence
	if m.Fence != nil {
		if f, err = structFence(ctx, "delete", m); err != nil {
			return err
		}
	}
	return t.delete(ctx, db, key, exp, f)
}

func modelFor(op string, ptr any) (*vmodel.Model, reflect.Value, error) {
	rv := reflect.ValueOf(ptr)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return nil, rv, inputErr(op, "value", fmt.Sprintf("%T is not a non-nil pointer to a struct", ptr), ErrInvalidArg)
	}
	m, err := vmodel.Of(rv.Type())
	return m, rv, err
}

// keyFor returns the key value of the struct rv points to for table t: the
// values of the key fields matched to t's key columns by name, in t's
// column order (one value, or a CompositeKey for several columns).
func keyFor(m *vmodel.Model, rv reflect.Value, t *Table) (any, error) {
	cols := t.cfg.keys
	v := rv.Elem()
	if len(m.Keys) == 1 && len(cols) == 1 && m.Keys[0].Column == cols[0] {
		// the common case, without a CompositeKey to allocate
		x := v.FieldByIndex(m.Keys[0].Index).Interface()
		if reason := t.missing(x); reason != "" {
			return nil, &KeyError{Table: t.name, Column: cols[0], Reason: reason}
		}
		return x, nil
	}
	if err := matchKeys(m, t); err != nil {
		return nil, err
	}
	vals := make(CompositeKey, len(cols))
	for i, c := range cols {
		k := keyField(m, c)
		x := v.FieldByIndex(k.Index).Interface()
		if reason := t.missing(x); reason != "" {
			return nil, &KeyError{Table: t.name, Column: c, Reason: reason}
		}
		vals[i] = x
	}
	return vals, nil
}

// matchKeys checks that m's key fields and t's key columns pair up one to
// one by column name.
func matchKeys(m *vmodel.Model, t *Table) error {
	mismatch := func(col, reason string) error {
		return &KeyError{Table: t.name, Column: col, Reason: reason +
			" (the key columns are " + strings.Join(t.cfg.keys, ", ") + "; the key fields of " + m.Type.String() +
			" map to " + strings.Join(m.KeyColumns(), ", ") + ")"}
	}
	if len(m.Keys) == 0 {
		return mismatch(t.cfg.keys[0], m.Type.String()+` has no key field: tag the key field(s) lock:"key"`)
	}
	for i, k := range m.Keys {
		if !containsString(t.cfg.keys, k.Column) {
			return mismatch(k.Column, fmt.Sprintf("key field %s maps to column %q, which is not a key column of the table", k.Name, k.Column))
		}
		for _, prev := range m.Keys[:i] {
			if prev.Column == k.Column {
				return mismatch(k.Column, fmt.Sprintf("key fields %s and %s both map to column %q", prev.Name, k.Name, k.Column))
			}
		}
	}
	for _, c := range t.cfg.keys {
		if keyField(m, c) == nil {
			return mismatch(c, fmt.Sprintf(`no key field maps to key column %q: tag it lock:"key" (with column=%s if its name differs)`, c, c))
		}
	}
	return nil
}

// keyField returns the key field for column col, or nil.
func keyField(m *vmodel.Model, col string) *vmodel.KeyField {
	for _, k := range m.Keys {
		if k.Column == col {
			return k
		}
	}
	return nil
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
