// Package nilcheck tells a nil handle from a usable one, for the packages
// that take a database handle, client or transaction as an interface: a
// typed nil inside the interface (a nil *sql.DB passed as a txlock.DB, a
// nil *pgxpool.Tx as a pgx.Tx) is not == nil, and would panic on first use
// instead of being refused with sqlock.ErrNilHandle.
package nilcheck

import (
	"database/sql"
	"reflect"
)

// Is reports whether v is nil: an untyped nil, or a nil pointer, map,
// slice, func or channel held in the interface.
func Is(v any) bool {
	switch h := v.(type) {
	case nil:
		return true
	// The common handles, without reflection: Is runs on every call of
	// the hot paths.
	case *sql.DB:
		return h == nil
	case *sql.Conn:
		return h == nil
	case *sql.Tx:
		return h == nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
