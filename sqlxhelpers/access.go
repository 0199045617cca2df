package sqlxhelpers

import (
	"reflect"
	"unsafe"
)

// accessor reads one struct field for a bind argument. Fields of the
// predeclared types (int64, string, …) reached without a pointer are read at
// their offset from the struct's address: no reflection on the hot path, so
// the write touches only the plan and the struct — it runs right after a
// network round trip, with cold caches. Every other field goes through
// reflection (and a nil embedded pointer on the way reads as NULL).
type accessor struct {
	off   uintptr
	kind  reflect.Kind // reflect.Invalid: use index
	index []int
}

func newAccessor(t reflect.Type, index []int) accessor {
	a := accessor{index: index}
	off, ft, ok := fieldOffset(t, index)
	if ok && ft.PkgPath() == "" && ft.Name() == ft.Kind().String() { // a predeclared type, not a named one
		switch ft.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.String, reflect.Bool, reflect.Float32, reflect.Float64:
			a.off, a.kind = off, ft.Kind()
		}
	}
	return a
}

// fieldOffset returns the offset of the field at index from the start of a
// t, when no pointer lies on the way.
func fieldOffset(t reflect.Type, index []int) (uintptr, reflect.Type, bool) {
	var off uintptr
	for _, i := range index {
		if t.Kind() != reflect.Struct {
			return 0, nil, false
		}
		f := t.Field(i)
		off += f.Offset
		t = f.Type
	}
	return off, t, true
}

// get returns the field's value; p is the struct's address, elem the struct.
func (a *accessor) get(p unsafe.Pointer, elem reflect.Value) any {
	q := unsafe.Add(p, a.off)
	switch a.kind {
	case reflect.Int:
		return *(*int)(q)
	case reflect.Int8:
		return *(*int8)(q)
	case reflect.Int16:
		return *(*int16)(q)
	case reflect.Int32:
		return *(*int32)(q)
	case reflect.Int64:
		return *(*int64)(q)
	case reflect.Uint:
		return *(*uint)(q)
	case reflect.Uint8:
		return *(*uint8)(q)
	case reflect.Uint16:
		return *(*uint16)(q)
	case reflect.Uint32:
		return *(*uint32)(q)
	case reflect.Uint64:
		return *(*uint64)(q)
	case reflect.String:
		return *(*string)(q)
	case reflect.Bool:
		return *(*bool)(q)
	case reflect.Float32:
		return *(*float32)(q)
	case reflect.Float64:
		return *(*float64)(q)
	}
	return readField(elem, a.index)
}

// isZero reports whether a fast field holds its zero value; ok is false for
// fields read by reflection.
func (a *accessor) isZero(p unsafe.Pointer) (zero, ok bool) {
	q := unsafe.Add(p, a.off)
	switch a.kind {
	case reflect.Int, reflect.Uint:
		return *(*uint)(q) == 0, true
	case reflect.Int8, reflect.Uint8:
		return *(*uint8)(q) == 0, true
	case reflect.Int16, reflect.Uint16:
		return *(*uint16)(q) == 0, true
	case reflect.Int32, reflect.Uint32:
		return *(*uint32)(q) == 0, true
	case reflect.Int64, reflect.Uint64:
		return *(*uint64)(q) == 0, true
	case reflect.String:
		return len(*(*string)(q)) == 0, true
	}
	return false, false
}

// versionAccessor reads and writes an integer version field in place.
type versionAccessor struct {
	off  uintptr
	kind reflect.Kind // reflect.Invalid: go through versioned.Field
}

func newVersionAccessor(t reflect.Type, index []int) versionAccessor {
	off, ft, ok := fieldOffset(t, index)
	if !ok {
		return versionAccessor{}
	}
	switch ft.Kind() { // named integer types too: only the bits matter here
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return versionAccessor{off: off, kind: ft.Kind()}
	}
	return versionAccessor{}
}

// get returns the version as int64; ok is false when the accessor cannot
// (or the unsigned value does not fit an int64: the slow path reports it).
func (v *versionAccessor) get(p unsafe.Pointer) (n int64, ok bool) {
	q := unsafe.Add(p, v.off)
	switch v.kind {
	case reflect.Int:
		return int64(*(*int)(q)), true
	case reflect.Int8:
		return int64(*(*int8)(q)), true
	case reflect.Int16:
		return int64(*(*int16)(q)), true
	case reflect.Int32:
		return int64(*(*int32)(q)), true
	case reflect.Int64:
		return *(*int64)(q), true
	case reflect.Uint:
		u := *(*uint)(q)
		return int64(u), uint64(u) <= 1<<63-1
	case reflect.Uint8:
		return int64(*(*uint8)(q)), true
	case reflect.Uint16:
		return int64(*(*uint16)(q)), true
	case reflect.Uint32:
		return int64(*(*uint32)(q)), true
	case reflect.Uint64:
		u := *(*uint64)(q)
		return int64(u), u <= 1<<63-1
	}
	return 0, false
}

// set stores n, which the caller has checked is within the field's range.
func (v *versionAccessor) set(p unsafe.Pointer, n int64) bool {
	q := unsafe.Add(p, v.off)
	switch v.kind {
	case reflect.Int:
		*(*int)(q) = int(n)
	case reflect.Int8:
		*(*int8)(q) = int8(n)
	case reflect.Int16:
		*(*int16)(q) = int16(n)
	case reflect.Int32:
		*(*int32)(q) = int32(n)
	case reflect.Int64:
		*(*int64)(q) = n
	case reflect.Uint:
		*(*uint)(q) = uint(n)
	case reflect.Uint8:
		*(*uint8)(q) = uint8(n)
	case reflect.Uint16:
		*(*uint16)(q) = uint16(n)
	case reflect.Uint32:
		*(*uint32)(q) = uint32(n)
	case reflect.Uint64:
		*(*uint64)(q) = uint64(n)
	default:
		return false
	}
	return true
}
