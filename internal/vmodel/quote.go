package vmodel

import (
	"strconv"
	"strings"
)

// QuoteIdent quotes one identifier (a column, or one part of a table name)
// with quote character q ('"' for PostgreSQL and SQLite, '`' for MySQL):
// the name is wrapped in q and any q inside it is doubled, so the result
// always names exactly the given string and never ends the quoted name
// early. It fails with *InputError (ErrInvalidArg) for an empty name, a NUL
// byte or invalid UTF-8.
func QuoteIdent(op, arg, name string, q byte) (string, error) {
	if err := CheckIdent(op, arg, name); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(name) + 2)
	WriteQuoted(&b, name, q)
	return b.String(), nil
}

// QuoteTable quotes a table name that may be qualified with dots
// ("billing.invoices" becomes "billing"."invoices"): each part is quoted as
// QuoteIdent does, and an empty part is refused. A dot is always a
// separator; a table whose name contains a dot cannot be named.
func QuoteTable(op, name string, q byte) (string, error) {
	if name == "" {
		return "", InputErr(op, "table", "empty name", ErrInvalidArg)
	}
	var b strings.Builder
	b.Grow(len(name) + 4)
	for i, part := range strings.Split(name, ".") {
		if err := CheckIdent(op, "table", part); err != nil {
			if part == "" {
				return "", InputErr(op, "table", strconv.Quote(name)+" has an empty part", ErrInvalidArg)
			}
			return "", err
		}
		if i > 0 {
			b.WriteByte('.')
		}
		WriteQuoted(&b, part, q)
	}
	return b.String(), nil
}

// WriteQuoted writes name quoted with q, doubling any q inside it. The
// caller has checked name with CheckIdent.
func WriteQuoted(b *strings.Builder, name string, q byte) {
	b.WriteByte(q)
	for i := 0; i < len(name); i++ {
		if name[i] == q {
			b.WriteByte(q)
		}
		b.WriteByte(name[i])
	}
	b.WriteByte(q)
}
