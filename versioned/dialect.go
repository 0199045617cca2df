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
	// MySQL (and MariaDB): ? placeholders and `backquoted` identifiers.
	// Any DSN works: versioned writes always change the version, and a
	// compare-and-swap that changed nothing reads the row again to tell a
	// swap to the values the row already has (Won; MySQL counts that row
	// as unaffected unless the DSN sets clientFoundRows=true) from a lost
	// one. The reads after a conflict (WithProbe, the swap's second query)
	// are locking reads, so inside a REPEATABLE READ transaction they see
	// the newest row, as the write did, not the transaction's snapshot.
	// See docs/versioned.md#mysql-and-mariadb.
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

// system is the dialect's database as OpenTelemetry's db.system.name
// spells it, for observe.Event.System. MySQL is "mysql" for MariaDB too:
// the dialect is the same, and telling the servers apart would cost a
// query.
func (d Dialect) system() string {
	switch d {
	case Postgres:
		return "postgresql"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return ""
}

func (d Dialect) valid() bool { return d <= SQLite }

// lockingRead is the suffix that makes a SELECT read the newest committed
// row instead of the transaction's snapshot: InnoDB's consistent reads in
// REPEATABLE READ see the snapshot of the transaction's first read, while
// its writes (and locking reads) see the latest row. A read after a
// conflict must agree with the write it explains. The failed write has
// already locked the row (or its gap) inside a transaction, so the lock
// adds no wait there. Postgres reads the newest row in READ COMMITTED
// and reports a serialization failure at the write in REPEATABLE READ;
// SQLite has one writer.
func (d Dialect) lockingRead() string {
	if d == MySQL {
		return " FOR UPDATE"
	}
	return ""
}

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
