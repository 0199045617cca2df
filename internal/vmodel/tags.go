package vmodel

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// TagName is the struct tag this package reads.
const TagName = "lock"

// Tag is a parsed lock tag. The grammar is a comma-separated list of
// items, spaces around items ignored:
//
//	version          the field is the row's version (one per struct)
//	key              the field is (part of) the row's key
//	fence            the field is the row's fence: the fencing token of the
//	                 last lock holder that wrote it (at most one per struct)
//	column=NAME      the column's name, overriding db:"…" and snake_case
//
// Exactly one of version, key and fence must be present; anything else (an
// empty tag, an empty or unknown item, a repeated item, an empty column) is
// an error, so a typo such as lock:"verison" is caught rather than ignored.
type Tag struct {
	Version bool
	Key     bool
	Fence   bool
	Column  string // "" unless column= was given
}

// ParseTag parses the value of a lock tag.
func ParseTag(s string) (Tag, error) {
	var t Tag
	if strings.TrimSpace(s) == "" {
		return t, fmt.Errorf("empty lock tag: want %q, %q or %q", "version", "key", "fence")
	}
	seenCol := false
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "":
			return Tag{}, fmt.Errorf("empty item in lock tag %q", s)
		case item == "version":
			if t.Version {
				return Tag{}, fmt.Errorf("%q repeated in lock tag", item)
			}
			t.Version = true
		case item == "key":
			if t.Key {
				return Tag{}, fmt.Errorf("%q repeated in lock tag", item)
			}
			t.Key = true
		case item == "fence":
			if t.Fence {
				return Tag{}, fmt.Errorf("%q repeated in lock tag", item)
			}
			t.Fence = true
		case strings.HasPrefix(item, "column="):
			if seenCol {
				return Tag{}, fmt.Errorf("column= repeated in lock tag %q", s)
			}
			seenCol = true
			t.Column = strings.TrimSpace(item[len("column="):])
			if err := CheckIdent("tag", "column", t.Column); err != nil {
				return Tag{}, fmt.Errorf("bad column in lock tag %q: %w", s, err)
			}
		default:
			return Tag{}, fmt.Errorf("unknown item %q in lock tag (known: version, key, fence, column=NAME)", item)
		}
	}
	var kinds []string
	for _, k := range []struct {
		on   bool
		name string
	}{{t.Version, "version"}, {t.Key, "key"}, {t.Fence, "fence"}} {
		if k.on {
			kinds = append(kinds, k.name)
		}
	}
	switch len(kinds) {
	case 2, 3:
		return Tag{}, fmt.Errorf("lock tag %q: a field cannot be both %s and %s", s, kinds[0], kinds[1])
	case 0:
		return Tag{}, fmt.Errorf("lock tag %q: says none of version, key and fence", s)
	}
	return t, nil
}

// String returns the canonical form of t, which ParseTag reads back as t.
func (t Tag) String() string {
	var s string
	switch {
	case t.Version:
		s = "version"
	case t.Key:
		s = "key"
	case t.Fence:
		s = "fence"
	}
	if t.Column != "" {
		s += ",column=" + t.Column
	}
	return s
}

// Tags checks the lock tags of one struct type, field by field in
// declaration order, by the rules every adapter shares (package versioned
// and sqlxhelpers through Of, gormplugin over GORM's schema): each tag
// parses, a struct has one version field and at most one fence, both
// plain Go integers, and the fence has a column of its own. What only one
// adapter knows (how it reaches a field, how it names a column) the
// adapter checks itself. The zero Tags is ready.
type Tags struct {
	version, fence string // the Go names of the version and fence fields met so far
}

// Field checks the field name of type t, tagged lock:"raw". It returns the
// parsed tag, the Int of a version or fence field's type, and the reason
// the field cannot be what its tag says ("" when it can).
func (s *Tags) Field(name, raw string, t reflect.Type) (Tag, Int, string) {
	tag, err := ParseTag(raw)
	if err != nil {
		return tag, Int{}, err.Error()
	}
	if tag.Key {
		return tag, Int{}, ""
	}
	slot, what := &s.version, "version"
	if tag.Fence {
		slot, what = &s.fence, "fence"
	}
	if *slot != "" {
		return tag, Int{}, "a second " + what + " field (the first is " + *slot + ")"
	}
	n, reason := IntOf(t)
	if reason != "" {
		if tag.Fence {
			reason = "the fence must be a plain Go integer field (int64 holds every token), not " + t.String()
		}
		return tag, Int{}, reason
	}
	*slot = name
	return tag, n, ""
}

// Versioned reports whether a version field was met; Fenced, a fence.
func (s *Tags) Versioned() bool { return s.version != "" }

// Fenced reports whether a fence field was met.
func (s *Tags) Fenced() bool { return s.fence != "" }

// Done checks the struct as a whole once every field was met, given the
// columns the adapter maps the version, the fence ("" without one) and the
// key fields to: it returns the reason the struct cannot be written
// versioned, or "". The reason is about the fence field when there is one
// and the struct has no version.
func (s *Tags) Done(version, fence string, keys []string) string {
	if s.version == "" {
		if s.fence != "" {
			return `no field tagged lock:"version": the lock:"fence" field ` + s.fence + " needs one beside it"
		}
		return `no field tagged lock:"version"`
	}
	if s.fence == "" {
		return ""
	}
	if fence == version {
		return "the fence maps to column " + strconv.Quote(fence) + ", the version's column"
	}
	for _, k := range keys {
		if k == fence {
			return "the fence maps to column " + strconv.Quote(fence) + ", a key column"
		}
	}
	return ""
}
