package pgident_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/pgident"
)

func TestParseTable(t *testing.T) {
	for s, want := range map[string]string{
		"sqlock_leases":                `"sqlock_leases"`,
		"Leases_Mixed":                 `"Leases_Mixed"`,
		"_x":                           `"_x"`,
		"Ops.Leases_Mixed":             `"Ops"."Leases_Mixed"`,
		".a":                           `"a"`,
		strings.Repeat("t", 52):        `"` + strings.Repeat("t", 52) + `"`,
		strings.Repeat("s", 63) + ".t": `"` + strings.Repeat("s", 63) + `"."t"`,
	} {
		tb, err := pgident.ParseTable("test", s, 52)
		if err != nil || tb.String() != want {
			t.Errorf("%q: %v, %v; want %s", s, tb, err, want)
		}
	}
	for _, s := range []string{
		"", ".", "a.", "a.b.c", "1abc", "a;drop table x", `"x"`, "a b", "é", "a\x00",
		strings.Repeat("t", 53), strings.Repeat("s", 64) + ".t",
	} {
		_, err := pgident.ParseTable("test: WithTable", s, 52)
		if !errors.Is(err, sqlock.ErrInvalidArgument) || !errors.Is(err, sqlock.ErrInvalidOption) ||
			!strings.HasPrefix(err.Error(), "test: WithTable: ") {
			t.Errorf("%q: %v, want an invalid argument and option from test: WithTable", s, err)
		}
	}
}

// oldRE is the rule lease and idem each wrote with a regular expression
// before this package: the fuzz test holds ParseTable to it.
var oldRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// FuzzParseTable: ParseTable accepts exactly what the regular-expression
// rule accepted, within the lengths; what it accepts quotes to the form
// pgx.Identifier gives and parses back to itself; what it refuses matches
// both sentinels.
func FuzzParseTable(f *testing.F) {
	for _, s := range []string{"sqlock_leases", "Ops.Leases", ".a", "a.", "a.b.c", "1a", `"x"`, "a;b", "é", strings.Repeat("x", 60)} {
		f.Add(s, 53)
	}
	f.Fuzz(func(t *testing.T, s string, maxName int) {
		maxName = 1 + (maxName%pgident.MaxLen+pgident.MaxLen)%pgident.MaxLen // 1..63
		tb, err := pgident.ParseTable("fuzz", s, maxName)
		schema, name, qualified := strings.Cut(s, ".")
		if !qualified {
			schema, name = "", s
		}
		want := oldRE.MatchString(name) && len(name) <= maxName &&
			(schema == "" || oldRE.MatchString(schema) && len(schema) <= pgident.MaxLen)
		if (err == nil) != want {
			t.Fatalf("%q (name ≤ %d): err = %v, the rule says valid = %v", s, maxName, err, want)
		}
		if err != nil {
			if !errors.Is(err, sqlock.ErrInvalidArgument) || !errors.Is(err, sqlock.ErrInvalidOption) {
				t.Fatalf("%q: %v matches neither sentinel", s, err)
			}
			return
		}
		parts := pgx.Identifier{tb.Name}
		if tb.Schema != "" {
			parts = pgx.Identifier{tb.Schema, tb.Name}
		}
		if got := tb.String(); got != parts.Sanitize() {
			t.Fatalf("%q: quoted %s, pgx quotes %s", s, got, parts.Sanitize())
		}
		again := tb.Name
		if tb.Schema != "" {
			again = tb.Schema + "." + tb.Name
		}
		if tb2, err := pgident.ParseTable("fuzz", again, maxName); err != nil || tb2 != tb {
			t.Fatalf("%q parsed to %+v; %q parses to %+v, %v", s, tb, again, tb2, err)
		}
	})
}
