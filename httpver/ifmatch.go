package httpver

import (
	"strings"
)

// EntityTag is one entity-tag of an If-Match or If-None-Match list (RFC
// 9110 §8.8.3): Opaque is the quoted string without its quotes, Weak is
// true for a W/ tag.
type EntityTag struct {
	Weak   bool
	Opaque string
}

// String formats t as it travels: "opaque" or W/"opaque".
func (t EntityTag) String() string {
	if t.Weak {
		return `W/"` + t.Opaque + `"`
	}
	return `"` + t.Opaque + `"`
}

// Condition is a parsed If-Match (or If-None-Match) field: Any for "*",
// otherwise the listed tags in order (possibly none: a present but empty
// list, which nothing matches).
type Condition struct {
	Any  bool
	Tags []EntityTag
}

// ParseCondition parses the values of an If-Match or If-None-Match field,
// every field line of the request (r.Header.Values), by RFC 9110's grammar:
//
//	If-Match = "*" / #entity-tag
//	entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE
//	etagc = %x21 / %x23-7E / %x80-FF
//
// Lists are comma-separated with optional whitespace, and empty list
// elements are accepted (RFC 9110 §5.6.1). "*" must stand alone: "*"
// beside a tag, a tag without its quotes, a lower-case w/, a control
// character or a space inside the quotes is malformed, and the error
// matches [ErrMalformed]. Parsing never reads past the values given.
func ParseCondition(values []string) (Condition, error) {
	var c Condition
	for _, v := range values {
		rest := v
		for {
			rest = strings.TrimLeft(rest, " \t")
			if rest == "" {
				break
			}
			if rest[0] == ',' {
				rest = rest[1:]
				continue
			}
			if rest[0] == '*' {
				if c.Any || len(c.Tags) > 0 {
					return Condition{}, malformed("\"*\" must be the only value")
				}
				c.Any = true
				rest = rest[1:]
			} else {
				if c.Any {
					return Condition{}, malformed("\"*\" must be the only value")
				}
				t, n, err := parseTag(rest)
				if err != nil {
					return Condition{}, err
				}
				c.Tags = append(c.Tags, t)
				rest = rest[n:]
			}
			rest = strings.TrimLeft(rest, " \t")
			if rest != "" && rest[0] != ',' {
				return Condition{}, malformed("entity-tags must be separated by commas")
			}
		}
	}
	return c, nil
}

// parseTag reads one entity-tag at the start of s and returns it with the
// number of bytes it took.
func parseTag(s string) (EntityTag, int, error) {
	var t EntityTag
	i := 0
	if strings.HasPrefix(s, "W/") {
		t.Weak = true
		i = 2
	}
	if i >= len(s) || s[i] != '"' {
		return EntityTag{}, 0, malformed("an entity-tag is a quoted string, optionally prefixed W/")
	}
	i++
	start := i
	for ; i < len(s); i++ {
		c := s[i]
		if c == '"' {
			t.Opaque = s[start:i]
			return t, i + 1, nil
		}
		if !etagc(c) {
			return EntityTag{}, 0, malformed("an entity-tag may not contain spaces or control characters")
		}
	}
	return EntityTag{}, 0, malformed("unterminated entity-tag")
}

// etagc reports whether c may stand inside an entity-tag's quotes.
func etagc(c byte) bool { return c == 0x21 || (c >= 0x23 && c != 0x7f) }
