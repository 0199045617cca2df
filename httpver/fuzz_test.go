package httpver_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/httpver"
)

// FuzzParseCondition: the parser never panics; what it accepts is RFC
// 9110's grammar — tags of etagc bytes only, "*" alone — and formats back
// to a field that parses to the same condition; what it refuses is
// ErrMalformed.
func FuzzParseCondition(f *testing.F) {
	for _, s := range []string{`"order:MQ:v7"`, `W/"x"`, `*`, `"a", W/"b" ,, "c"`, ` , `, `"a b"`, `*, "a"`,
		`"unterminated`, `w/"x"`, `"x""y"`, "\"\x80\xff\"", `""`} {
		f.Add(s, "")
		f.Add(s, `"second line"`)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		c, err := httpver.ParseCondition([]string{a, b})
		if err != nil {
			if !errors.Is(err, httpver.ErrMalformed) {
				t.Fatalf("%q %q: %v does not match ErrMalformed", a, b, err)
			}
			return
		}
		if c.Any && len(c.Tags) > 0 {
			t.Fatalf("%q %q: * beside tags", a, b)
		}
		var parts []string
		for _, tag := range c.Tags {
			for i := 0; i < len(tag.Opaque); i++ {
				if ch := tag.Opaque[i]; ch <= 0x20 || ch == '"' || ch == 0x7f {
					t.Fatalf("%q %q: tag %q holds byte %#x", a, b, tag.Opaque, ch)
				}
			}
			parts = append(parts, tag.String())
		}
		field := strings.Join(parts, ", ")
		if c.Any {
			field = "*"
		}
		again, err := httpver.ParseCondition([]string{field})
		if err != nil || again.Any != c.Any || len(again.Tags) != len(c.Tags) {
			t.Fatalf("%q %q: formatted as %q, parsed again %+v, %v", a, b, field, again, err)
		}
		for i := range c.Tags {
			if again.Tags[i] != c.Tags[i] {
				t.Fatalf("%q %q: tag %d %+v became %+v", a, b, i, c.Tags[i], again.Tags[i])
			}
		}
	})
}

// A tag names one resource at one version: tags of different kinds, ids
// or versions differ, even where a naive "kind:id:version" would collide.
func TestETagsNeverCollide(t *testing.T) {
	kinds := []*httpver.Kind{httpver.MustKind("order"), httpver.MustKind("order.x"), httpver.MustKind("o")}
	ids := []string{"", "1", "12", "1:v2", "rder:1", `"`, "a b", "\x00", "é", "v"}
	seen := map[string]string{}
	for _, k := range kinds {
		for _, id := range ids {
			for _, v := range []int64{0, 1, 2, 12, -1, 1 << 62} {
				tag := k.ETag(id, v)
				who := fmt.Sprintf("%s %q v%d", k.Name(), id, v)
				if prev, ok := seen[tag]; ok {
					t.Fatalf("%s and %s share %s", prev, who, tag)
				}
				seen[tag] = who
				c, err := httpver.ParseCondition([]string{tag})
				if err != nil || len(c.Tags) != 1 || c.Tags[0].Weak {
					t.Fatalf("%s: %q is not one strong tag: %v", who, tag, err)
				}
			}
		}
	}
}

func TestKindNames(t *testing.T) {
	for _, bad := range []string{"", "a:b", "a b", `"`, "ordér", strings.Repeat("x", 65)} {
		if _, err := httpver.NewKind(bad); !errors.Is(err, sqlock.ErrInvalidArgument) {
			t.Errorf("NewKind(%q): %v, want ErrInvalidArgument", bad, err)
		}
	}
}
