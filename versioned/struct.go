package versioned

import (
	"context"
	"fmt"
	"reflect"
)

// UpdateStruct is Update for a struct with a lock:"version" field: the key
// comes from the struct's key fields (see Model.Keys), the expected version
// from its version field, the assignments from set. On success the new
// version is stored in the struct; on any error the struct is unchanged.
// The Table's column names are the ones used in SQL.
func UpdateStruct(ctx context.Context, db Execer, t *Table, ptr any, set ...Pair) error {
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
	key, err := m.keyOf(rv, t.cfg.zeroKey)
	if err != nil {
		return err
	}
	n, err := t.update(ctx, db, key, exp, set)
	if err != nil {
		return err
	}
	return m.Version.Set(rv, n)
}

// DeleteStruct is Delete for a struct with a lock:"version" field, by the
// struct's key and version.
func DeleteStruct(ctx context.Context, db Execer, t *Table, ptr any) error {
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
	key, err := m.keyOf(rv, t.cfg.zeroKey)
	if err != nil {
		return err
	}
	return t.delete(ctx, db, key, exp)
}

func modelFor(op string, ptr any) (*Model, reflect.Value, error) {
	rv := reflect.ValueOf(ptr)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return nil, rv, inputErr(op, "value", fmt.Sprintf("%T is not a non-nil pointer to a struct", ptr), ErrInvalidArg)
	}
	m, err := ModelOf(rv.Type())
	return m, rv, err
}
