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

// name is the dialect's name for messages.
func (d Dialect) name() string {
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

func (d Dialect) writeQuoted(b *strings.Builder, name string) {
	vmodel.WriteQuoted(b, name, d.quoteChar())
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
	s.paramAt(s.n)
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
