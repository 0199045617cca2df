// Package pgident reads and quotes the table names sqlock's packages take
// from their callers (lease.WithTable, idem.WithTable,
// inspect.WithLeaseTable), by one rule, so that a name one package accepts
// names the same table in every other.
//
// A table name is [schema.]name, cut at the first dot, each part an
// identifier of ASCII letters, digits and underscores that does not start
// with a digit, kept in its case and always quoted: a table made as
// "Leases_Mixed" is "Leases_Mixed", never leases_mixed. A leading dot
// (".name") reads as name, unqualified.
package pgident

import (
	"errors"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

// MaxLen is the longest identifier PostgreSQL keeps (NAMEDATALEN-1 bytes):
// a longer one is silently truncated, so that two names would meet.
const MaxLen = 63

// Table is a table name that ParseTable accepted.
type Table struct {
	Schema string // "" for an unqualified name, found on the search_path
	Name   string
}

// invalid is the kind of a refused name: a table name is always an
// option's value, so it is an invalid option and an invalid argument.
var invalid = errors.Join(sqlock.ErrInvalidOption, sqlock.ErrInvalidArgument)

// ParseTable reads s as [schema.]name. The schema may be MaxLen bytes, the
// name maxName: a package that names other objects after the table
// ("<name>_token_seq", "<name>_expires_at") passes MaxLen less the
// suffix, so that those names are not truncated. A refusal matches
// [sqlock.ErrInvalidOption] and [sqlock.ErrInvalidArgument], and its text
// starts with who (the package and option that asked, "lease: WithTable").
func ParseTable(who, s string, maxName int) (Table, error) {
	var t Table
	if schema, name, ok := strings.Cut(s, "."); ok {
		t = Table{Schema: schema, Name: name}
	} else {
		t = Table{Name: s}
	}
	if !valid(t.Name, maxName) || (t.Schema != "" && !valid(t.Schema, MaxLen)) {
		return Table{}, errkind.New(invalid,
			"%s: table name %q: want [schema.]table of letters, digits and underscores (table ≤ %d bytes, schema ≤ %d)", who, s, maxName, MaxLen)
	}
	return t, nil
}

func valid(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Ident is the object called name in t's schema, quoted: t.Ident(t.Name)
// is the table, t.Ident(t.Name+"_token_seq") its sequence.
func (t Table) Ident(name string) string {
	if t.Schema == "" {
		return Quote(name)
	}
	return Quote(t.Schema) + "." + Quote(name)
}

// String is the table, quoted.
func (t Table) String() string { return t.Ident(t.Name) }

// Quote quotes one identifier as pgx.Identifier.Sanitize does, for a name
// that takes no schema (an index's, a NOTIFY channel's).
func Quote(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `"`, `""`), "\x00", "") + `"`
}
