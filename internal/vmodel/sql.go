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
//
// A fenced write (Fence set) also writes the fencing token into the fence
// column and refuses a row whose fence is larger (a NULL fence counts as
// 0, never fenced):
//
//	UPDATE t SET a = ?, v = v + 1, f = ? WHERE k = ? AND v = ? AND COALESCE(f, 0) <= ?
//	DELETE FROM t WHERE k = ? AND v = ? AND COALESCE(f, 0) <= ?
//
// The token binds twice, after the assigned values and last.
type Stmt struct {
	Table   string   // the quoted table name
	Keys    []string // the quoted key columns, in key order
	Version string   // the quoted version column
	Fence   string   // the quoted fence column, "" for an unfenced write
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
	if s.Fence != "" {
		b.WriteString(", ")
		b.WriteString(s.Fence)
		b.WriteString(" = ")
		param(b)
	}
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

// guard writes the key condition, " AND v = ?" and the fence's condition.
func (s Stmt) guard(b *strings.Builder, param func(b *strings.Builder)) {
	s.WhereKey(b, param)
	b.WriteString(" AND ")
	b.WriteString(s.Version)
	b.WriteString(" = ")
	param(b)
	if s.Fence != "" {
		b.WriteString(" AND COALESCE(")
		b.WriteString(s.Fence)
		b.WriteString(", 0) <= ")
		param(b)
	}
}

// Probe writes the SELECT that tells why a fenced write matched no row:
//
//	SELECT v, f FROM t WHERE k1 = ? AND k2 = ?
func (s Stmt) Probe(b *strings.Builder, param func(b *strings.Builder)) {
	b.WriteString("SELECT ")
	b.WriteString(s.Version)
	b.WriteString(", ")
	b.WriteString(s.Fence)
	b.WriteString(" FROM ")
	b.WriteString(s.Table)
	s.WhereKey(b, param)
}
