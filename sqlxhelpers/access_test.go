package sqlxhelpers

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/jmoiron/sqlx/reflectx"
	"github.com/sqlock/sqlock/versioned"
)

type cents int64

type inner struct {
	S string
	U uint16
}

type allKinds struct {
	I   int
	I8  int8
	I16 int16
	I32 int32
	I64 int64
	U   uint
	U8  uint8
	U16 uint16
	U32 uint32
	U64 uint64
	S   string
	B   bool
	F32 float32
	F64 float64
	C   cents     // a named type: read by reflection, keeps its type
	T   time.Time // a struct: by reflection
	P   *int64    // a pointer: by reflection
	inner
	Emb *inner // through a pointer: by reflection, nil reads as NULL
}

// The offset accessors read exactly what reflection reads, with the same
// dynamic type.
func TestAccessorMatchesReflection(t *testing.T) {
	n := int64(5)
	v := allKinds{I: -1, I8: -8, I16: -16, I32: -32, I64: math.MinInt64, U: math.MaxUint, U8: 8, U16: 16, U32: 32,
		U64: math.MaxUint64, S: "s", B: true, F32: 1.5, F64: -2.5, C: 7, T: time.Unix(1, 0), P: &n,
		inner: inner{S: "in", U: 3}}
	rt := reflect.TypeFor[allKinds]()
	rv := reflect.ValueOf(&v)
	fast := 0
	var walk func(st reflect.Type, index []int)
	walk = func(st reflect.Type, index []int) {
		for i := 0; i < st.NumField(); i++ {
			idx := append(append([]int(nil), index...), i)
			f := st.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type, idx)
				continue
			}
			if f.Anonymous || !f.IsExported() && f.Type.Kind() != reflect.Pointer {
				continue
			}
			a := newAccessor(rt, idx)
			if a.kind != reflect.Invalid {
				fast++
			}
			got := a.get(rv.UnsafePointer(), rv.Elem())
			want := readField(rv.Elem(), idx)
			if !reflect.DeepEqual(got, want) || reflect.TypeOf(got) != reflect.TypeOf(want) {
				t.Errorf("%s: accessor %#v, reflection %#v", f.Name, got, want)
			}
		}
	}
	walk(rt, nil)
	if fast != 16 { // the 14 predeclared fields and the 2 of the embedded value
		t.Errorf("%d fields on the fast path", fast)
	}
	nilEmb := newAccessor(rt, []int{18, 0})
	if got := nilEmb.get(rv.UnsafePointer(), rv.Elem()); got != nil {
		t.Errorf("field behind a nil embedded pointer: %v", got)
	}
}

type rev uint8

// The version accessor agrees with versioned.Field for every integer kind,
// named types included, and leaves what it cannot read to it.
func TestVersionAccessor(t *testing.T) {
	check := func(ptr any, vals ...int64) {
		t.Helper()
		rv := reflect.ValueOf(ptr)
		f, err := versioned.FieldOf(rv.Type())
		if err != nil {
			t.Fatal(err)
		}
		va := newVersionAccessor(rv.Type().Elem(), f.Index)
		if va.kind == reflect.Invalid {
			t.Fatalf("%T: no accessor", ptr)
		}
		for _, n := range vals {
			if !va.set(rv.UnsafePointer(), n) {
				t.Fatal("set")
			}
			got, ok := va.get(rv.UnsafePointer())
			want, werr := f.Get(rv)
			if !ok || werr != nil || got != want || got != n {
				t.Errorf("%T: set %d, accessor %d (%v), Field %d (%v)", ptr, n, got, ok, want, werr)
			}
		}
	}
	check(&struct {
		V int `lock:"version"`
	}{}, 0, -1, math.MaxInt64)
	check(&struct {
		V int8 `lock:"version"`
	}{}, 0, -128, 127)
	check(&struct {
		V int16 `lock:"version"`
	}{}, math.MinInt16, math.MaxInt16)
	check(&struct {
		V int32 `lock:"version"`
	}{}, math.MinInt32, math.MaxInt32)
	check(&struct {
		V int64 `lock:"version"`
	}{}, math.MinInt64, math.MaxInt64)
	check(&struct {
		V rev `lock:"version"`
	}{}, 0, 255)
	check(&struct {
		V uint16 `lock:"version"`
	}{}, 0, math.MaxUint16)
	check(&struct {
		V uint32 `lock:"version"`
	}{}, 0, math.MaxUint32)
	check(&struct {
		V uint64 `lock:"version"`
	}{}, 0, math.MaxInt64)
	check(&struct {
		V uint `lock:"version"`
	}{}, 0, math.MaxInt64)
	// A uint64 above MaxInt64 is not read by the accessor: versioned
	// reports the overflow.
	big := struct {
		ID uint64 `db:"id"`
		V  uint64 `lock:"version"`
	}{ID: 1, V: math.MaxUint64}
	ti := buildTypeInfo(reflect.TypeOf(big), reflectx.NewMapperFunc("db", toLower))
	if _, ok := ti.vacc.get(reflect.ValueOf(&big).UnsafePointer()); ok {
		t.Error("accessor read a uint64 above MaxInt64")
	}
	if _, err := ti.versionOf(reflect.ValueOf(&big)); !errors.Is(err, versioned.ErrOverflow) {
		t.Errorf("versionOf: %v", err)
	}
}
