package vmodel

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"math"
	"reflect"
	"strconv"
)

// An Assignment is a write's value for one column, converted for the
// struct field of that column, to be stored once the write succeeded.
type Assignment struct {
	index []int
	value reflect.Value
}

// Assignment matches column to m's field by column name (the shallowest
// field, as Go's promotion picks one) and converts v for it, before
// anything is sent. A column no field maps to, two fields of one depth
// for it, or a value the field cannot hold exactly is an *InputError
// (ErrInvalidArg) naming the column.
func (m *Model) Assignment(op, column string, v any) (Assignment, error) {
	bad := func(reason string) (Assignment, error) {
		return Assignment{}, InputErr(op, "set column", strconv.Quote(column)+": "+reason, ErrInvalidArg)
	}
	var f *KeyField
	depth := 0
	for i, c := range m.Columns {
		switch {
		case c.Column != column:
		case f == nil || m.depths[i] < depth:
			f, depth = c, m.depths[i]
		case m.depths[i] == depth:
			return bad(fmt.Sprintf("fields %s and %s of %s both map to it", f.Name, c.Name, m.Type))
		}
	}
	if f == nil {
		return bad(fmt.Sprintf("no field of %s maps to it (lock column=, db:\"…\" or the field name in snake_case), so the struct could not follow the row", m.Type))
	}
	x, reason := convertTo(f.Type, v)
	if reason != "" {
		return bad(fmt.Sprintf("%s for field %s (%s)", reason, f.Name, f.Type))
	}
	return Assignment{index: f.Index, value: x}, nil
}

// Store stores the value in the field of the struct ptr points to.
func (a Assignment) Store(ptr reflect.Value) { ptr.Elem().FieldByIndex(a.index).Set(a.value) }

// convertTo returns v as a value of type t that holds exactly what v
// holds, or the reason it cannot: v's own type or one assignable to t; nil
// for a pointer, interface, slice or map; for a pointer field, the value
// it points to; for a sql.Scanner field, what Scan makes of the value as
// the driver would be handed it; an integer or float that t holds without
// loss; or the same kind under another name (a string for a type Status
// string).
func convertTo(t reflect.Type, v any) (reflect.Value, string) {
	if v == nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map:
			return reflect.Zero(t), ""
		}
	} else if x := reflect.ValueOf(v); x.Type().AssignableTo(t) {
		return x, ""
	}
	if t.Kind() == reflect.Pointer && v != nil {
		if x, reason := convertTo(t.Elem(), v); reason == "" {
			p := reflect.New(t.Elem())
			p.Elem().Set(x)
			return p, ""
		}
	}
	if reflect.PointerTo(t).Implements(scannerType) {
		dv, err := driver.DefaultParameterConverter.ConvertValue(v)
		if err != nil {
			return reflect.Value{}, fmt.Sprintf("%T is no driver value: %v", v, err)
		}
		p := reflect.New(t)
		if err := p.Interface().(sql.Scanner).Scan(dv); err != nil {
			return reflect.Value{}, fmt.Sprintf("%T does not scan into it: %v", v, err)
		}
		return p.Elem(), ""
	}
	if v == nil {
		return reflect.Value{}, "nil (NULL) does not fit a non-nullable field: use a pointer or a sql.Null type"
	}
	x := reflect.ValueOf(v)
	if exactly(x, t) {
		return x.Convert(t), ""
	}
	return reflect.Value{}, fmt.Sprintf("%T %v does not convert exactly", v, v)
}

var scannerType = reflect.TypeFor[sql.Scanner]()

// exactly reports whether x converts to t without changing its value.
func exactly(x reflect.Value, t reflect.Type) bool {
	to := reflect.New(t).Elem()
	switch {
	case isInt(x.Kind()) && isInt(t.Kind()):
		return !to.OverflowInt(x.Int())
	case isInt(x.Kind()) && isUint(t.Kind()):
		return x.Int() >= 0 && !to.OverflowUint(uint64(x.Int()))
	case isUint(x.Kind()) && isInt(t.Kind()):
		return x.Uint() <= math.MaxInt64 && !to.OverflowInt(int64(x.Uint()))
	case isUint(x.Kind()) && isUint(t.Kind()):
		return !to.OverflowUint(x.Uint())
	case isFloat(x.Kind()) && isFloat(t.Kind()):
		return !to.OverflowFloat(x.Float()) && x.Convert(t).Float() == x.Float()
	case isInt(x.Kind()) && isFloat(t.Kind()):
		f := x.Convert(t).Float()
		return inInt64(f) && int64(f) == x.Int()
	case isUint(x.Kind()) && isFloat(t.Kind()):
		f := x.Convert(t).Float()
		return f >= 0 && f < 1<<64 && uint64(f) == x.Uint()
	case isFloat(x.Kind()) && isInt(t.Kind()):
		f := x.Float()
		return f == math.Trunc(f) && inInt64(f) && !to.OverflowInt(int64(f))
	case isFloat(x.Kind()) && isUint(t.Kind()):
		f := x.Float()
		return f == math.Trunc(f) && f >= 0 && f < 1<<64 && !to.OverflowUint(uint64(f))
	case x.Kind() == t.Kind() && !isNumber(t.Kind()):
		return x.Type().ConvertibleTo(t)
	}
	return false
}

// inInt64 reports a float inside int64's range, where Go's conversion to
// an integer is defined.
func inInt64(f float64) bool { return f >= -(1<<63) && f < 1<<63 }

func isInt(k reflect.Kind) bool   { return k >= reflect.Int && k <= reflect.Int64 }
func isUint(k reflect.Kind) bool  { return k >= reflect.Uint && k <= reflect.Uintptr }
func isFloat(k reflect.Kind) bool { return k == reflect.Float32 || k == reflect.Float64 }
func isNumber(k reflect.Kind) bool {
	return isInt(k) || isUint(k) || isFloat(k) || k == reflect.Complex64 || k == reflect.Complex128
}
