package vmodel_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sqlock/sqlock/internal/vmodel"
)

func TestParseTagFence(t *testing.T) {
	for in, want := range map[string]vmodel.Tag{
		"fence":              {Fence: true},
		"fence,column=fence": {Fence: true, Column: "fence"},
	} {
		got, err := vmodel.ParseTag(in)
		if err != nil || got != want {
			t.Errorf("ParseTag(%q) = %+v, %v", in, got, err)
		}
		if again, err := vmodel.ParseTag(got.String()); err != nil || again != got {
			t.Errorf("round trip of %q: %+v, %v", in, again, err)
		}
	}
	for _, bad := range []string{"fence,fence", "fence,version", "key,fence", "fences", "fence,column="} {
		if tag, err := vmodel.ParseTag(bad); err == nil {
			t.Errorf("ParseTag(%q) = %+v, want an error", bad, tag)
		}
	}
}

type fencedDoc struct {
	ID      int64
	Version int64 `lock:"version"`
	Holder  int32 `lock:"fence,column=holder_token"`
}

func TestModelFenceField(t *testing.T) {
	m, err := vmodel.Of(reflect.TypeOf(fencedDoc{}))
	if err != nil {
		t.Fatal(err)
	}
	if m.Fence == nil || m.Fence.Name != "Holder" || m.Fence.Column != "holder_token" || m.Fence.Max != 1<<31-1 {
		t.Fatalf("fence = %+v", m.Fence)
	}
	if len(m.Keys) != 1 || m.Keys[0].Column != "id" {
		t.Fatalf("keys = %v", m.KeyColumns())
	}
	d := fencedDoc{ID: 1}
	if err := m.Fence.Set(reflect.ValueOf(&d), 42); err != nil || d.Holder != 42 {
		t.Fatalf("Set: %v %+v", err, d)
	}
	if m, err := vmodel.Of(reflect.TypeOf(tenantDoc{})); err != nil || m.Fence != nil {
		t.Fatalf("a model without a fence: %v %+v", err, m)
	}
}

type (
	twoFences struct {
		V int64 `lock:"version"`
		A int64 `lock:"fence"`
		B int64 `lock:"fence"`
	}
	stringFence struct {
		V int64  `lock:"version"`
		F string `lock:"fence"`
	}
	pointerFence struct {
		V int64  `lock:"version"`
		F *int64 `lock:"fence"`
	}
	fenceOnVersionColumn struct {
		V int64 `lock:"version"`
		F int64 `lock:"fence,column=v"`
	}
	fenceOnKeyColumn struct {
		ID int64
		V  int64 `lock:"version"`
		F  int64 `lock:"fence,column=id"`
	}
	fenceWithoutVersion struct {
		ID int64
		F  int64 `lock:"fence"`
	}
)

// A fence field is one per struct, a plain integer, on a column of its own.
func TestModelFenceRejects(t *testing.T) {
	for _, tc := range []struct {
		v      any
		reason string
	}{
		{twoFences{}, "second fence field (the first is A)"},
		{stringFence{}, "the fence must be a plain Go integer"},
		{pointerFence{}, "the fence must be a plain Go integer"},
		{fenceOnVersionColumn{}, "the version's column"},
		{fenceOnKeyColumn{}, "a key column"},
		{fenceWithoutVersion{}, "no field tagged"},
	} {
		_, err := vmodel.Of(reflect.TypeOf(tc.v))
		var te *vmodel.TagError
		if !errors.Is(err, vmodel.ErrInvalidModel) || !errors.As(err, &te) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("Of(%T) = %v; want ErrInvalidModel mentioning %q", tc.v, err, tc.reason)
		}
	}
}

func TestFencedStmt(t *testing.T) {
	st := vmodel.Stmt{Table: `"t"`, Keys: []string{`"id"`}, Version: `"v"`, Fence: `"f"`}
	param := func(b *strings.Builder) { b.WriteByte('?') }
	var b strings.Builder
	st.Update(&b, 1, func(b *strings.Builder, _ int) { b.WriteString(`"a"`) }, param)
	if want := `UPDATE "t" SET "a" = ?, "v" = "v" + 1, "f" = ? WHERE "id" = ? AND "v" = ? AND COALESCE("f", 0) <= ?`; b.String() != want {
		t.Errorf("update:\n got %s\nwant %s", b.String(), want)
	}
	b.Reset()
	st.Probe(&b, param)
	if want := `SELECT "v", "f" FROM "t" WHERE "id" = ?`; b.String() != want {
		t.Errorf("probe:\n got %s\nwant %s", b.String(), want)
	}
}
