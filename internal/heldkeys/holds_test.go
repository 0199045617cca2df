package heldkeys

import (
	"context"
	"testing"
)

type pool struct{ name string }

func TestConflict(t *testing.T) {
	a, b := &pool{"a"}, &pool{"b"}
	k1, k2, k3 := Tag{1, 2, 1}, Tag{0, 7, 2}, Tag{9, 9, 2}
	ended := false
	ctx := context.Background()
	ctx = With(ctx, &Hold{Handle: a, Tags: []Tag{k1, k2}})
	ctx = With(ctx, &Hold{Handle: b, Tags: []Tag{k3}, Shared: true})
	ctx = With(ctx, &Hold{Handle: a, Tags: []Tag{k3}, Ended: func() bool { return ended }})
	for _, tc := range []struct {
		name   string
		handle any
		tags   []Tag
		shared bool
		want   bool
	}{
		{"same handle, same key", a, []Tag{k2}, false, true},
		{"same handle, shared asks, exclusive held", a, []Tag{k1}, true, true},
		{"other handle", b, []Tag{k1}, false, false},
		{"shared with shared", b, []Tag{k3}, true, false},
		{"exclusive with shared", b, []Tag{k3}, false, true},
		{"live inner hold", a, []Tag{k3}, false, true},
		{"no common key", a, []Tag{{5, 5, 1}}, false, false},
		{"unknown handle", nil, []Tag{k1}, false, false},
		{"uncomparable handle", []int{1}, []Tag{k1}, false, false},
	} {
		if _, got := Conflict(ctx, tc.handle, tc.tags, tc.shared); got != tc.want {
			t.Errorf("%s: conflict = %v, want %v", tc.name, got, tc.want)
		}
	}
	ended = true
	if _, got := Conflict(ctx, a, []Tag{k3}, false); got {
		t.Error("an ended hold still conflicts")
	}
	n := 0
	Each(ctx, func(*Hold) bool { n++; return true })
	if n != 2 {
		t.Errorf("Each saw %d live holds, want 2", n)
	}
	if _, got := Conflict(With(context.Background(), &Hold{Handle: []int{1}, Tags: []Tag{k1}}), []int{1}, []Tag{k1}, false); got {
		t.Error("a hold with an uncomparable handle conflicts")
	}
}
