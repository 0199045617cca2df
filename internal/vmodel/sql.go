package vmodel

import "strings"

// Stmt is the shape of a versioned write, from identifiers already quoted
// for the caller's dialect. It writes the statement text; each caller
// supplies its own placeholder style (package versioned's $n or ?,
// sqlx's bind types), so both spell the same statement the same way:
//
//	UPDATE t SET a = ?, b = ?, v = v + 1 WHERE k1 = ? AND k2 = ? AND v = ?
//	DELETE FROM t WHERE k1 = ? AND k2 = ? AND v = ?
//
// The arguments bind in that order: the assigned values, the key values,
// the expected version.
type Stmt struct {
	Table   string   // the quoted table name
	Keys    []string // the quoted key columns, in key order
	Version string   // the quoted version column
}

// Update writes the UPDATE; set writes the quoted name of assigned column
// i (for i < n) and param the next placeholder.
func (s Stmt) Update(b *strings.Builder, n int, set func(b *strings.Builder, i int), param func(b *strings.Builder)) {
	b.WriteString("UPDATE ")
	b.WriteString(s.Table)
	b.WriteString(" SET ")
	for i := range n {
		set(b, i)
		b.WriteString(" = ")
		param(b)
		b.WriteString(", ")
	}
	b.WriteString(s.Version)
	b.WriteString(" = ")
	b.WriteString(s.Version)
	b.WriteString(" + 1")
	s.guard(b, param)
}

// Delete writes the DELETE.
func (s Stmt) Delete(b *strings.Builder, param func(b *strings.Builder)) {
	b.WriteString("DELETE FROM ")
	b.WriteString(s.Table)
	s.guard(b, param)
}

// WhereKey writes " WHERE k1 = ? AND k2 = ?".
func (s Stmt) WhereKey(b *strings.Builder, param func(b *strings.Builder)) {
	for i, q := range s.Keys {
		if i == 0 {
			b.WriteString(" WHERE ")
		} else {
			b.WriteString(" AND ")
		}
		b.WriteString(q)
		b.WriteString(" = ")
		param(b)
	}
}

// guard writes the key condition and " AND v = ?".
func (s Stmt) guard(b *strings.Builder, param func(b *strings.Builder)) {
	s.WhereKey(b, param)
	b.WriteString(" AND ")
	b.WriteString(s.Version)
	b.WriteString(" = ")
	param(b)
}
