package vmodel_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sqlock/sqlock/internal/vmodel"
)

func TestParseTag(t *testing.T) {
	good := map[string]vmodel.Tag{
		"version":               {Version: true},
		"key":                   {Key: true},
		" version ":             {Version: true},
		"version,column=rev":    {Version: true, Column: "rev"},
		"column=Rev, version":   {Version: true, Column: "Rev"},
		"key,column=tenant id":  {Key: true, Column: "tenant id"},
		`version,column=a"b`:    {Version: true, Column: `a"b`},
		"version, column = x ":  {}, // "column = x" is not "column=": unknown item
		"version,column==weird": {Version: true, Column: "=weird"},
	}
	for in, want := range good {
		got, err := vmodel.ParseTag(in)
		if in == "version, column = x " {
			if err == nil {
				t.Errorf("ParseTag(%q) accepted", in)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("ParseTag(%q) = %+v, %v; want %+v", in, got, err, want)
			continue
		}
		again, err := vmodel.ParseTag(got.String())
		if err != nil || again != got {
			t.Errorf("round trip of %q via %q = %+v, %v", in, got.String(), again, err)
		}
	}
	for _, bad := range []string{"", " ", "verison", "Version", "version,", ",version", "version,,key",
		"version,version", "key,key", "version,key", "column=x", "version,column=", "version,column=a,column=b",
		"version,column=a\x00b", "version,column=\xff", "-", "version;key", "optimistic"} {
		if tag, err := vmodel.ParseTag(bad); err == nil {
			t.Errorf("ParseTag(%q) = %+v, want an error", bad, tag)
		}
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"ID": "id", "Id": "id", "Version": "version", "LockVersion": "lock_version", "UserID": "user_id",
		"HTTPStatus": "http_status", "Rev2": "rev2", "V2Count": "v2_count", "already_snake": "already_snake",
		"ÄrgerNis": "ärger_nis", "": "",
	} {
		if got := vmodel.SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

type Base struct {
	Rev uint16 `lock:"version" db:"rev"`
}

type embedsBase struct {
	Base
	ID   string
	Name string
}

type Rev int32

type tenantDoc struct {
	Tenant  string `lock:"key,column=tenant_id"`
	DocID   int64  `lock:"key" db:"doc"`
	Body    string
	Version Rev `lock:"version,column=lock_version" db:"ignored"`
}

type PtrBase struct {
	V int64 `lock:"version"`
}

func TestModelOf(t *testing.T) {
	m, err := vmodel.Of(reflect.TypeOf(&embedsBase{}))
	if err != nil {
		t.Fatal(err)
	}
	f := m.Version
	if f.Name != "Rev" || !reflect.DeepEqual(f.Index, []int{0, 0}) || f.Type.Kind() != reflect.Uint16 ||
		f.Column != "rev" || f.DBTag != "rev" || f.Min != 0 || f.Max != math.MaxUint16 || f.Signed() {
		t.Fatalf("field = %+v", *f)
	}
	if len(m.Keys) != 1 || m.Keys[0].Name != "ID" || m.Keys[0].Column != "id" {
		t.Fatalf("keys = %+v", m.Keys)
	}
	v := embedsBase{Base: Base{Rev: 65534}, ID: "a"}
	if n, err := f.Get(reflect.ValueOf(v)); err != nil || n != 65534 {
		t.Fatalf("Get = %d, %v", n, err)
	}
	n, _ := f.Next(65534)
	if err := f.Set(reflect.ValueOf(&v), n); err != nil || v.Rev != 65535 {
		t.Fatalf("Set: %v, %d", err, v.Rev)
	}
	if _, err := f.Next(65535); !errors.Is(err, vmodel.ErrOverflow) {
		t.Fatalf("Next at max: %v", err)
	}
	if err := f.Set(reflect.ValueOf(&v), 65536); !errors.Is(err, vmodel.ErrOverflow) || v.Rev != 65535 {
		t.Fatalf("Set out of range: %v, %d", err, v.Rev)
	}
	if err := f.Set(reflect.ValueOf(v), 1); !errors.Is(err, vmodel.ErrInvalidArg) {
		t.Fatalf("Set on a non-addressable struct: %v", err)
	}
	if _, err := f.Get(reflect.ValueOf(tenantDoc{})); !errors.Is(err, vmodel.ErrInvalidArg) {
		t.Fatalf("Get on another type: %v", err)
	}
	if _, err := f.Get(reflect.ValueOf((*embedsBase)(nil))); !errors.Is(err, vmodel.ErrInvalidArg) {
		t.Fatalf("Get on nil: %v", err)
	}
	key, _, err := m.KeyOf(reflect.ValueOf(&v))
	if err != nil || key != "a" {
		t.Fatalf("KeyOf = %v, %v", key, err)
	}
	if _, _, err := m.KeyOf(reflect.ValueOf(embedsBase{})); !errors.Is(err, vmodel.ErrNoKey) {
		t.Fatalf("KeyOf zero: %v", err)
	}

	m2, err := vmodel.Of(reflect.TypeOf(tenantDoc{}))
	if err != nil {
		t.Fatal(err)
	}
	if m2.Version.Column != "lock_version" || m2.Version.Type != reflect.TypeOf(Rev(0)) || m2.Version.Min != math.MinInt32 ||
		!reflect.DeepEqual(m2.KeyColumns(), []string{"tenant_id", "doc"}) {
		t.Fatalf("model = %+v %+v", *m2.Version, m2.KeyColumns())
	}
	_, keys, err := m2.KeyOf(reflect.ValueOf(tenantDoc{Tenant: "t", DocID: 4}))
	if err != nil || !reflect.DeepEqual(keys, []any{"t", int64(4)}) {
		t.Fatalf("composite KeyOf = %v, %v", keys, err)
	}
	var ke *vmodel.KeyError
	if _, _, err := m2.KeyOf(reflect.ValueOf(tenantDoc{Tenant: "t"})); !errors.As(err, &ke) || ke.Column != "doc" {
		t.Fatalf("partial composite key: %v", err)
	}
	// Pointer and value types share one cached model.
	a, _ := vmodel.FieldOf(reflect.TypeOf(tenantDoc{}))
	b, _ := vmodel.FieldOf(reflect.TypeOf(&tenantDoc{}))
	if a != b {
		t.Fatal("FieldOf(T) and FieldOf(*T) differ")
	}
	if n, err := vmodel.VersionOf(&tenantDoc{Version: -3}); err != nil || n != -3 {
		t.Fatalf("VersionOf = %d, %v", n, err)
	}
	d := tenantDoc{}
	if err := vmodel.SetVersion(&d, 9); err != nil || d.Version != 9 {
		t.Fatalf("SetVersion: %v %d", err, d.Version)
	}
	if err := vmodel.SetVersion(d, 9); !errors.Is(err, vmodel.ErrInvalidArg) {
		t.Fatalf("SetVersion on a value: %v", err)
	}
}

func TestModelOfAllIntegerKinds(t *testing.T) {
	check := func(typ reflect.Type, lo, hi int64) {
		t.Helper()
		st := reflect.StructOf([]reflect.StructField{
			{Name: "ID", Type: reflect.TypeOf(int64(0))},
			{Name: "V", Type: typ, Tag: `lock:"version"`},
		})
		f, err := vmodel.FieldOf(st)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if f.Min != lo || f.Max != hi {
			t.Errorf("%s: bounds [%d, %d], want [%d, %d]", typ, f.Min, f.Max, lo, hi)
		}
		p := reflect.New(st)
		if err := f.Set(p, hi); err != nil {
			t.Fatalf("%s: Set(max): %v", typ, err)
		}
		if got, err := f.Get(p); err != nil || got != hi {
			t.Fatalf("%s: Get = %d, %v", typ, got, err)
		}
		if _, err := f.Next(hi); !errors.Is(err, vmodel.ErrOverflow) {
			t.Errorf("%s: Next(max) = %v", typ, err)
		}
		if n, err := f.Next(hi - 1); err != nil || n != hi {
			t.Errorf("%s: Next(max-1) = %d, %v", typ, n, err)
		}
	}
	check(reflect.TypeOf(int(0)), math.MinInt, math.MaxInt)
	check(reflect.TypeOf(int8(0)), math.MinInt8, math.MaxInt8)
	check(reflect.TypeOf(int16(0)), math.MinInt16, math.MaxInt16)
	check(reflect.TypeOf(int32(0)), math.MinInt32, math.MaxInt32)
	check(reflect.TypeOf(int64(0)), math.MinInt64, math.MaxInt64)
	check(reflect.TypeOf(uint(0)), 0, math.MaxInt64)
	check(reflect.TypeOf(uint8(0)), 0, math.MaxUint8)
	check(reflect.TypeOf(uint16(0)), 0, math.MaxUint16)
	check(reflect.TypeOf(uint32(0)), 0, math.MaxUint32)
	check(reflect.TypeOf(uint64(0)), 0, math.MaxInt64)

	// A uint64 above MaxInt64 cannot be bound by database/sql: overflow.
	st := reflect.StructOf([]reflect.StructField{{Name: "V", Type: reflect.TypeOf(uint64(0)), Tag: `lock:"version"`}})
	f, _ := vmodel.FieldOf(st)
	p := reflect.New(st)
	p.Elem().Field(0).SetUint(math.MaxUint64)
	if _, err := f.Get(p); !errors.Is(err, vmodel.ErrOverflow) {
		t.Fatalf("Get of a uint64 above MaxInt64: %v", err)
	}
}

type (
	strVersion struct {
		V string `lock:"version"`
	}
	floatVersion struct {
		V float64 `lock:"version"`
	}
	ptrVersion struct {
		V *int64 `lock:"version"`
	}
	uintptrVersion struct {
		V uintptr `lock:"version"`
	}
	twoVersions struct {
		A int64 `lock:"version"`
		B int64 `lock:"version"`
	}
	embeddedTwo struct {
		Base
		V int64 `lock:"version"`
	}
	shadowedTwo struct { // Base.Rev is hidden by Rev, but both are tagged: still two
		Base
		Rev int64 `lock:"version"`
	}
	viaPointer struct {
		*PtrBase
		ID int64
	}
	unexportedVersion struct {
		v int64 `lock:"version"` //lint:ignore U1000 the test is that it is refused
	}
	typoTag struct {
		V int64 `lock:"verison"`
	}
	emptyTag struct {
		V int64 `lock:""`
	}
	keyAndVersion struct {
		V int64 `lock:"version,key"`
	}
	badKeyTag struct {
		K int64 `lock:"key,column="`
		V int64 `lock:"version"`
	}
	noVersion struct {
		ID int64
	}
	selfRef struct {
		*selfRef       //lint:ignore U1000 the test is that walking it terminates
		V        int64 `lock:"version"`
	}
)

func TestModelOfRejects(t *testing.T) {
	cases := []struct {
		v      any
		want   error
		reason string
	}{
		{strVersion{}, vmodel.ErrInvalidModel, "Go integer type"},
		{floatVersion{}, vmodel.ErrInvalidModel, "not float64"},
		{ptrVersion{}, vmodel.ErrInvalidModel, "nullable versions (*int64)"},
		{uintptrVersion{}, vmodel.ErrInvalidModel, "not uintptr"},
		{twoVersions{}, vmodel.ErrInvalidModel, "second version field (the first is A)"},
		{embeddedTwo{}, vmodel.ErrInvalidModel, "second version field (the first is Rev)"},
		{shadowedTwo{}, vmodel.ErrInvalidModel, "second version field"},
		{viaPointer{}, vmodel.ErrInvalidModel, "embedded pointer *vmodel_test.PtrBase"},
		{unexportedVersion{}, vmodel.ErrInvalidModel, "unexported"},
		{typoTag{}, vmodel.ErrInvalidModel, `unknown item "verison"`},
		{emptyTag{}, vmodel.ErrInvalidModel, "empty lock tag"},
		{keyAndVersion{}, vmodel.ErrInvalidModel, "both version and key"},
		{badKeyTag{}, vmodel.ErrInvalidModel, "bad column"},
		{noVersion{}, vmodel.ErrInvalidModel, "no field tagged"},
		{42, vmodel.ErrInvalidModel, "not a struct"},
		{[]strVersion{}, vmodel.ErrInvalidModel, "not a struct"},
	}
	for _, tc := range cases {
		typ := reflect.TypeOf(tc.v)
		for i := 0; i < 2; i++ { // the verdict is cached and repeated
			f, err := vmodel.FieldOf(typ)
			var te *vmodel.TagError
			if f != nil || !errors.Is(err, tc.want) || !errors.As(err, &te) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("FieldOf(%s) = %v, %v; want %v mentioning %q", typ, f, err, tc.want, tc.reason)
			}
		}
	}
	if _, err := vmodel.FieldOf(nil); !errors.Is(err, vmodel.ErrInvalidModel) {
		t.Errorf("FieldOf(nil) = %v", err)
	}
	// A self-referencing embedded pointer terminates.
	if f, err := vmodel.FieldOf(reflect.TypeOf(selfRef{})); err != nil || f.Name != "V" {
		t.Errorf("selfRef: %v, %v", f, err)
	}
	if _, err := vmodel.VersionOf(nil); !errors.Is(err, vmodel.ErrInvalidArg) {
		t.Errorf("VersionOf(nil) = %v", err)
	}
}

func TestModelOfConcurrent(t *testing.T) {
	type fresh struct {
		ID int64
		V  int16 `lock:"version"`
	}
	typ := reflect.TypeOf(fresh{})
	var wg sync.WaitGroup
	got := make([]*vmodel.Field, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = vmodel.FieldOf(typ)
		}()
	}
	wg.Wait()
	for _, f := range got {
		if f == nil || f != got[0] {
			t.Fatal("concurrent FieldOf calls saw different fields")
		}
	}
}

func TestFieldAccessAllocatesNothing(t *testing.T) {
	f, err := vmodel.FieldOf(reflect.TypeOf(tenantDoc{}))
	if err != nil {
		t.Fatal(err)
	}
	d := &tenantDoc{Version: 5}
	rv := reflect.ValueOf(d)
	allocs := testing.AllocsPerRun(100, func() {
		n, _ := f.Get(rv)
		n, _ = f.Next(n)
		_ = f.Set(rv, n)
	})
	if allocs != 0 {
		t.Fatalf("Get/Next/Set allocate %v times", allocs)
	}
}

func TestNextAndBounds(t *testing.T) {
	if v, err := vmodel.Next(int8(126)); err != nil || v != 127 {
		t.Fatalf("Next(int8 126) = %d, %v", v, err)
	}
	_, err := vmodel.Next(int8(127))
	var oe *vmodel.OverflowError
	if !errors.As(err, &oe) || oe.Type != "int8" || oe.Max != 127 || oe.Value != "127" {
		t.Fatalf("Next(int8 127) = %v", err)
	}
	if _, err := vmodel.Next(uint8(255)); !errors.Is(err, vmodel.ErrOverflow) {
		t.Fatal(err)
	}
	if _, err := vmodel.Next(Rev(math.MaxInt32)); err == nil || !strings.Contains(err.Error(), "vmodel_test.Rev") {
		t.Fatalf("named type overflow: %v", err)
	}
	if v, err := vmodel.Next(int64(-1)); err != nil || v != 0 {
		t.Fatalf("Next(-1) = %d, %v", v, err)
	}
	if _, err := vmodel.Next(uint64(math.MaxUint64)); !errors.Is(err, vmodel.ErrOverflow) {
		t.Fatal(err)
	}
	if _, err := vmodel.Int64(uint64(1 << 63)); !errors.Is(err, vmodel.ErrOverflow) {
		t.Fatal(err)
	}
	if lo, hi := vmodel.Bounds[uint32](); lo != 0 || hi != math.MaxUint32 {
		t.Fatalf("Bounds[uint32] = %d, %d", lo, hi)
	}
	if lo, hi := vmodel.Bounds[int16](); lo != math.MinInt16 || hi != math.MaxInt16 {
		t.Fatalf("Bounds[int16] = %d, %d", lo, hi)
	}
}

func TestKindBounds(t *testing.T) {
	if lo, hi, ok := vmodel.KindBounds(reflect.Int8); !ok || lo != math.MinInt8 || hi != math.MaxInt8 {
		t.Fatalf("Int8: %d %d %v", lo, hi, ok)
	}
	if _, hi, ok := vmodel.KindBounds(reflect.Uint64); !ok || hi != math.MaxInt64 {
		t.Fatalf("Uint64: %d %v", hi, ok)
	}
	for _, k := range []reflect.Kind{reflect.Uintptr, reflect.Float64, reflect.String, reflect.Pointer, reflect.Invalid} {
		if _, _, ok := vmodel.KindBounds(k); ok {
			t.Errorf("%s accepted", k)
		}
	}
}
