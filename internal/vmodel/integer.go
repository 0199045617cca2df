package vmodel

import (
	"math"
	"reflect"
	"strconv"
	"unsafe"
)

// Integer is every Go integer type a version can have: int, int8 … int64,
// uint, uint8 … uint64, and types defined on them (type Rev int32).
// uintptr is not a version type.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Bounds returns the smallest and largest version a V can hold here. For
// uint64 (and uint on 64-bit platforms) the largest is math.MaxInt64, not
// math.MaxUint64: database/sql refuses to bind a uint64 with the high bit
// set, and neither PostgreSQL's bigint nor SQLite's INTEGER could store it.
func Bounds[V Integer]() (lo, hi int64) {
	var z V
	bits := unsafe.Sizeof(z) * 8
	if ^z < 0 { // signed: ^0 is -1
		hi = int64(uint64(1)<<(bits-1) - 1)
		return -hi - 1, hi
	}
	if bits >= 64 {
		return 0, math.MaxInt64
	}
	return 0, int64(uint64(1)<<bits - 1)
}

// Int64 converts a version to int64, the form this package binds and
// reports. It fails with *OverflowError for an unsigned value above
// math.MaxInt64.
func Int64[V Integer](v V) (int64, error) {
	var z V
	if ^z < 0 || uint64(v) <= math.MaxInt64 {
		return int64(v), nil
	}
	lo, hi := Bounds[V]()
	return 0, &OverflowError{Type: typeName[V](), Value: strconv.FormatUint(uint64(v), 10), Min: lo, Max: hi}
}

// Next returns cur + 1, or *OverflowError (errors.Is(err, ErrOverflow)) when
// cur is already the largest version a V can hold: a version never wraps
// around to a value an old reader might still hold.
func Next[V Integer](cur V) (V, error) {
	n, err := Int64(cur)
	if err != nil {
		return cur, err
	}
	lo, hi := Bounds[V]()
	if n >= hi || n < lo {
		return cur, &OverflowError{Type: typeName[V](), Value: strconv.FormatInt(n, 10), Min: lo, Max: hi}
	}
	return cur + 1, nil
}

func typeName[V Integer]() string { return reflect.TypeFor[V]().String() }

// next is Next for a value already in int64 form with known bounds.
func next(cur, lo, hi int64, typ string) (int64, error) {
	if cur >= hi || cur < lo {
		return cur, &OverflowError{Type: typ, Value: strconv.FormatInt(cur, 10), Min: lo, Max: hi}
	}
	return cur + 1, nil
}

// KindBounds is Bounds for a reflect.Kind, for code that holds a
// reflect.Type rather than a type parameter (ORM schemas); ok is false for
// kinds that are not version types (anything but the ten integer kinds).
func KindBounds(k reflect.Kind) (lo, hi int64, ok bool) { return kindBounds(k) }

func kindBounds(k reflect.Kind) (lo, hi int64, ok bool) {
	switch k {
	case reflect.Int:
		lo, hi = Bounds[int]()
	case reflect.Int8:
		lo, hi = Bounds[int8]()
	case reflect.Int16:
		lo, hi = Bounds[int16]()
	case reflect.Int32:
		lo, hi = Bounds[int32]()
	case reflect.Int64:
		lo, hi = Bounds[int64]()
	case reflect.Uint:
		lo, hi = Bounds[uint]()
	case reflect.Uint8:
		lo, hi = Bounds[uint8]()
	case reflect.Uint16:
		lo, hi = Bounds[uint16]()
	case reflect.Uint32:
		lo, hi = Bounds[uint32]()
	case reflect.Uint64:
		lo, hi = Bounds[uint64]()
	default:
		return 0, 0, false
	}
	return lo, hi, true
}
