package vmodel

import (
	"database/sql/driver"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CheckIdent refuses an identifier no dialect can quote: empty, with a NUL
// byte, or not valid UTF-8 (*InputError, ErrInvalidArg).
func CheckIdent(op, arg, name string) error {
	switch {
	case name == "":
		return InputErr(op, arg, "empty name", ErrInvalidArg)
	case strings.IndexByte(name, 0) >= 0:
		return InputErr(op, arg, strconv.Quote(name)+" contains a NUL byte", ErrInvalidArg)
	case !utf8.ValidString(name):
		return InputErr(op, arg, strconv.Quote(name)+" is not valid UTF-8", ErrInvalidArg)
	}
	return nil
}

// MissingKey says why v cannot be a key value, or "" when it can. A zero
// value is missing unless zeroOK.
func MissingKey(v any, zeroOK bool) string {
	const zero = "zero value (use WithZeroKey if it is a real key)"
	switch x := v.(type) {
	case nil:
		return "nil"
	case int:
		if x == 0 && !zeroOK {
			return zero
		}
		return ""
	case int64:
		if x == 0 && !zeroOK {
			return zero
		}
		return ""
	case int32:
		if x == 0 && !zeroOK {
			return zero
		}
		return ""
	case string:
		if x == "" && !zeroOK {
			return zero
		}
		return ""
	case []byte:
		if x == nil {
			return "nil"
		}
		if len(x) == 0 && !zeroOK {
			return zero
		}
		return ""
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if rv.IsNil() {
			return "nil " + rv.Type().String()
		}
	}
	if vr, ok := v.(driver.Valuer); ok {
		dv, err := vr.Value()
		if err != nil {
			return "its Value method failed: " + err.Error()
		}
		if dv == nil {
			return "NULL"
		}
		return MissingKey(dv, zeroOK)
	}
	if rv.Kind() == reflect.Pointer {
		return MissingKey(rv.Elem().Interface(), zeroOK)
	}
	if !zeroOK && rv.IsZero() {
		return zero
	}
	return ""
}
