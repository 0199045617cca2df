package vmodel

import (
	"database/sql"
	"errors"
	"math"
	"reflect"
	"testing"
)

type assignDoc struct {
	ID      int64
	Version int64 `lock:"version"`
	Small   int8
	Count   uint16
	Ratio   float32
	Status  docStatus
	Note    sql.NullString
	Coupon  *string
	Any     any
	Tags    []string
	Renamed string `lock:"key,column=slug"`
	Hidden  string `db:"-"`
	assignBase
	Dup1 string `db:"dup"`
	Dup2 string `db:"dup"`
}

type assignBase struct {
	Small  string // shadowed by the outer Small (column small)
	Origin string
}

type docStatus string

// Assignment converts only what its field holds exactly, matches fields by
// column name (the shallowest wins, two at one depth are ambiguous), and
// refuses a column with no field.
func TestAssignmentConvertsOnlyExactly(t *testing.T) {
	m, err := Of(reflect.TypeFor[assignDoc]())
	if err != nil {
		t.Fatal(err)
	}
	s := "x"
	for _, tc := range []struct {
		col  string
		v    any
		want any // nil: refused
	}{
		{"small", 7, int8(7)}, {"small", int64(-128), int8(-128)}, {"small", 128, nil}, {"small", uint64(math.MaxUint64), nil},
		{"small", 3.0, int8(3)}, {"small", 3.5, nil}, {"small", math.Inf(1), nil}, {"small", "7", nil}, {"small", nil, nil},
		{"count", -1, nil}, {"count", 65535, uint16(65535)}, {"count", 65536, nil}, {"count", float32(2), uint16(2)},
		{"ratio", 0.5, float32(0.5)}, {"ratio", 0.1, nil}, {"ratio", 1 << 24, float32(1 << 24)}, {"ratio", 1<<24 + 1, nil},
		{"status", "paid", docStatus("paid")}, {"status", []byte("paid"), nil},
		{"note", "gift", sql.NullString{String: "gift", Valid: true}}, {"note", nil, sql.NullString{}},
		{"note", sql.NullString{String: "n", Valid: true}, sql.NullString{String: "n", Valid: true}}, {"note", struct{}{}, nil},
		{"coupon", "x", &s}, {"coupon", nil, (*string)(nil)}, {"coupon", &s, &s},
		{"any", 5, 5}, {"any", nil, nil},
		{"tags", []string{"a"}, []string{"a"}}, {"tags", nil, []string(nil)},
		{"slug", "s", "s"}, {"renamed", "s", nil}, {"origin", "o", "o"},
		{"hidden", "h", nil}, {"dup", "d", nil}, {"nothing", 1, nil},
	} {
		a, err := m.Assignment("update", tc.col, tc.v)
		refused := tc.want == nil && !(tc.col == "any" && tc.v == nil)
		if refused {
			if !errors.Is(err, ErrInvalidArg) {
				t.Errorf("%s = %#v: %v, want refused", tc.col, tc.v, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s = %#v: %v", tc.col, tc.v, err)
			continue
		}
		var d assignDoc
		a.Store(reflect.ValueOf(&d))
		f, _ := m.Type.FieldByName(map[string]string{"small": "Small", "count": "Count", "ratio": "Ratio",
			"status": "Status", "note": "Note", "coupon": "Coupon", "any": "Any", "tags": "Tags", "slug": "Renamed", "origin": "Origin"}[tc.col])
		got := reflect.ValueOf(d).FieldByIndex(f.Index).Interface()
		if p, ok := got.(*string); ok && p != nil && *p == s {
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s = %#v: field holds %#v, want %#v", tc.col, tc.v, got, tc.want)
		}
	}
}
