package vmodel_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sqlock/sqlock/internal/vmodel"
)

// FuzzParseTag: the tag parser never panics, accepts only tags that say
// exactly one of version, key and fence, and what it accepts survives a
// round trip through Tag.String.
func FuzzParseTag(f *testing.F) {
	for _, s := range []string{"version", "key", "version,column=rev", " key , column=a b ", "verison",
		"version,key", "fence", "fence,column=f", "key,fence", "column=x", "version,,", "version,column=", "version,column=a\x00", "\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tag, err := vmodel.ParseTag(s)
		if err != nil {
			if tag != (vmodel.Tag{}) {
				t.Fatalf("ParseTag(%q) returned %+v with error %v", s, tag, err)
			}
			return
		}
		if n := btoi(tag.Version) + btoi(tag.Key) + btoi(tag.Fence); n != 1 {
			t.Fatalf("ParseTag(%q) = %+v: exactly one of version, key and fence", s, tag)
		}
		if strings.ContainsRune(tag.Column, 0) || !utf8.ValidString(tag.Column) || strings.Contains(tag.Column, ",") {
			t.Fatalf("ParseTag(%q) accepted column %q", s, tag.Column)
		}
		again, err := vmodel.ParseTag(tag.String())
		if err != nil || again != tag {
			t.Fatalf("round trip %q → %+v → %q → %+v, %v", s, tag, tag.String(), again, err)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
