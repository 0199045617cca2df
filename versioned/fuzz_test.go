package versioned_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sqlock/sqlock/versioned"
)

// FuzzQuoteIdent: a quoted identifier is one token that names exactly the
// input — the quote character never appears undoubled inside it — in every
// dialect.
func FuzzQuoteIdent(f *testing.F) {
	for _, s := range []string{"id", `a"b`, "a`b", `""`, "``", "x; DROP TABLE t; --", "ümlaut", "a.b", "", "\x00", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, d := range []versioned.Dialect{versioned.Postgres, versioned.MySQL, versioned.SQLite} {
			q, err := d.QuoteIdent(s)
			if s == "" || strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
				if err == nil {
					t.Fatalf("%s: QuoteIdent(%q) accepted", d, s)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: QuoteIdent(%q): %v", d, s, err)
			}
			qc := q[:1]
			if len(q) < 2 || q[len(q)-1:] != qc || (qc != `"` && qc != "`") {
				t.Fatalf("%s: %q is not quoted", d, q)
			}
			inner := q[1 : len(q)-1]
			if strings.ReplaceAll(inner, qc+qc, "") != strings.ReplaceAll(s, qc, "") {
				t.Fatalf("%s: %q has an undoubled quote", d, q)
			}
			if strings.ReplaceAll(inner, qc+qc, qc) != s {
				t.Fatalf("%s: %q does not unquote to %q", d, q, s)
			}
		}
	})
}
