package versioned

import (
	"strconv"
	"strings"

	"github.com/sqlock/sqlock/internal/vmodel"
)

// Dialect is the SQL spelling of a database: how placeholders and quoted
// identifiers are written. The zero Dialect is Postgres.
type Dialect uint8

const (
	// Postgres: $1, $2 … placeholders and "double-quoted" identifiers.
	Postgres Dialect = iota
	// MySQL: ? placeholders and `backquoted` identifiers. Connect with
	// clientFoundRows=true if a compare-and-swap may set a column to the
	// value it already has (MySQL otherwise counts such a row as
	// unaffected); versioned writes always change the version, so they
	// need nothing.
	MySQL
	// SQLite: ? placeholders and "double-quoted" identifiers.
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "dialect(" + strconv.Itoa(int(d)) + ")"
}

func (d Dialect) valid() bool { return d <= SQLite }

func (d Dialect) quoteChar() byte {
	if d == MySQL {
		return '`'
	}
	return '"'
}

// Placeholder returns the n-th (1-based) bind parameter: "$n" for Postgres,
// "?" otherwise.
func (d Dialect) Placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// QuoteIdent quotes one identifier (a column, or one part of a table name)
// for d: the name is wrapped in the dialect's quote character and any
// quote character inside it is doubled, so the result always names exactly
// the given string and never ends the quoted name early. It fails with
// ErrInvalidIdent for an empty name, a NUL byte or invalid UTF-8.
func (d Dialect) QuoteIdent(name string) (string, error) {
	if err := checkIdent("quote", "identifier", name); err != nil {
		return "", err
	}
	if !d.valid() {
		return "", inputErr("quote", "dialect", d.String()+" is not a known dialect", ErrInvalidArg)
	}
	var b strings.Builder
	b.Grow(len(name) + 2)
	d.writeQuoted(&b, name)
	return b.String(), nil
}

// QuoteTable quotes a table name that may be qualified with dots
// ("billing.invoices" becomes "billing"."invoices"): each part is quoted as
// QuoteIdent does, and an empty part is ErrInvalidIdent. A dot is always a
// separator; a table whose name contains a dot cannot be named.
func (d Dialect) QuoteTable(name string) (string, error) {
	if name == "" {
		return "", inputErr("quote", "table", "empty name", ErrInvalidIdent)
	}
	if !d.valid() {
		return "", inputErr("quote", "dialect", d.String()+" is not a known dialect", ErrInvalidArg)
	}
	var b strings.Builder
	b.Grow(len(name) + 4)
	for i, part := range strings.Split(name, ".") {
		if err := checkIdent("quote", "table", part); err != nil {
			if part == "" {
				return "", inputErr("quote", "table", strconv.Quote(name)+" has an empty part", ErrInvalidIdent)
			}
			return "", err
		}
		if i > 0 {
			b.WriteByte('.')
		}
		d.writeQuoted(&b, part)
	}
	return b.String(), nil
}

func (d Dialect) writeQuoted(b *strings.Builder, name string) {
	q := d.quoteChar()
	b.WriteByte(q)
	for i := 0; i < len(name); i++ {
		if name[i] == q {
			b.WriteByte(q)
		}
		b.WriteByte(name[i])
	}
	b.WriteByte(q)
}

func checkIdent(op, arg, name string) error { return vmodel.CheckIdent(op, arg, name) }

// sqlBuf builds one statement: quoted identifiers are stored pre-quoted,
// values only ever as placeholders.
type sqlBuf struct {
	d Dialect
	b strings.Builder
	n int // placeholders written so far
}

func (s *sqlBuf) str(x string) { s.b.WriteString(x) }

// param writes the next placeholder and returns its number.
func (s *sqlBuf) param() int {
	s.n++
	if s.d == Postgres {
		s.b.WriteByte('$')
		s.b.WriteString(strconv.Itoa(s.n))
	} else {
		s.b.WriteByte('?')
	}
	return s.n
}

// paramTo is param in the form vmodel.Stmt takes (the builder is s.b).
func (s *sqlBuf) paramTo(*strings.Builder) { s.param() }

// paramAt writes placeholder n again (Postgres reuses $n; the others repeat
// the argument, which the caller must append again).
func (s *sqlBuf) paramAt(n int) {
	if s.d == Postgres {
		s.b.WriteByte('$')
		s.b.WriteString(strconv.Itoa(n))
	} else {
		s.b.WriteByte('?')
	}
}
