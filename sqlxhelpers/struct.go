package sqlxhelpers

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/sqlock/sqlock/internal/vguard"
	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/versioned"
)

// WriteOption configures one Update or Delete.
type WriteOption func(*writeConfig)

type writeConfig struct {
	cols   []string
	subset bool
}

// Columns limits an Update to these columns (by column name), in this order.
// With no columns the Update only increments the version (a "touch" that
// makes concurrent writers of the row go stale). Naming the version column,
// an unknown column or a column twice is *versioned.InputError
// (versioned.ErrInvalidArg).
func Columns(cols ...string) WriteOption {
	return func(c *writeConfig) { c.cols, c.subset = cols, true }
}

type planKey struct {
	t     reflect.Type
	table string
	cols  string
	op    string
}

// structPlan is a struct-driven statement, built once per type, table, op
// and column list.
type structPlan struct {
	ti    *typeInfo
	sql   string
	probe string  // for a fenced struct: SELECT version, fence by key
	set   [][]int // the assigned fields' indexes, in bind order
	err   error
}

func (s *state) plan(t reflect.Type, table string, op string, opts []WriteOption) (*structPlan, error) {
	wc := writeConfigOf(opts)
	k := planKey{t: t, table: table, op: op}
	if wc.subset {
		k.cols = "\x01" + strings.Join(wc.cols, "\x00")
	}
	if p, ok := s.plans.get(k); ok {
		return p, p.err
	}
	p := s.buildPlan(t, table, op, wc)
	p = s.plans.put(k, p)
	return p, p.err
}

// writeConfigOf applies opts. Without options (the usual call) nothing is
// allocated: the options take the config's address, which makes it escape.
func writeConfigOf(opts []WriteOption) writeConfig {
	if len(opts) == 0 {
		return writeConfig{}
	}
	wc := new(writeConfig)
	for _, o := range opts {
		if o != nil {
			o(wc)
		}
	}
	return *wc
}

func (s *state) buildPlan(t reflect.Type, table string, op string, wc writeConfig) *structPlan {
	p := &structPlan{}
	opName := op
	ti, err := s.typeInfo(t)
	if err != nil {
		p.err = err
		return p
	}
	p.ti = ti
	if len(ti.keys) == 0 {
		_, p.err = ti.key(table, reflect.Value{})
		return p
	}
	qc := s.cfg.quoteChar
	qt, err := vmodel.QuoteTable(opName, table, qc)
	if err != nil {
		p.err = err
		return p
	}
	quote := func(name string) (string, error) { return vmodel.QuoteIdent(opName, "column", name, qc) }
	qv, err := quote(ti.version.name)
	if err != nil {
		p.err = err
		return p
	}
	set := ti.cols
	if wc.subset {
		set = make([]column, 0, len(wc.cols))
		for i, c := range wc.cols {
			bad := func(reason string) {
				p.err = &versioned.InputError{Op: opName, Arg: "column", Reason: reason, Kind: versioned.ErrInvalidArg}
			}
			switch {
			case c == ti.version.name:
				bad(strconv.Quote(c) + " is the version column, which the write itself increments")
			case ti.fence != nil && c == ti.fence.name:
				bad(strconv.Quote(c) + " is the fence column, which the fenced write sets to the token")
			case slices.Contains(wc.cols[:i], c):
				bad(strconv.Quote(c) + " named twice")
			}
			if p.err != nil {
				return p
			}
			col, ok := ti.column(c)
			if !ok {
				bad(strconv.Quote(c) + " is not a column of " + t.String())
				return p
			}
			set = append(set, col)
		}
	}
	var qset []string // quoted in statement order: set columns, then keys
	if op == "update" {
		qset = make([]string, len(set))
		for i, c := range set {
			if qset[i], err = quote(c.name); err != nil {
				p.err = err
				return p
			}
			p.set = append(p.set, c.index)
		}
	}
	st := vmodel.Stmt{Table: qt, Version: qv, Keys: make([]string, len(ti.keys))}
	for i, k := range ti.keys {
		if st.Keys[i], err = quote(k.name); err != nil {
			p.err = err
			return p
		}
	}
	if ti.fence != nil {
		if st.Fence, err = quote(ti.fence.name); err != nil {
			p.err = err
			return p
		}
	}
	var b strings.Builder
	n := 0
	bind := func(b *strings.Builder) {
		n++
		writeBindVar(b, s.cfg.bindType, n, "p"+strconv.Itoa(n))
	}
	if ti.fence != nil {
		st.Probe(&b, bind)
		if s.cfg.quoteChar == '`' {
			// MySQL: a locking read sees the newest row, as the failed
			// write did, not a REPEATABLE READ transaction's snapshot.
			b.WriteString(" FOR UPDATE")
		}
		p.probe = b.String()
		b.Reset()
		n = 0
	}
	if op == "delete" {
		st.Delete(&b, bind)
		p.sql = b.String()
		return p
	}
	st.Update(&b, len(qset), func(b *strings.Builder, i int) { b.WriteString(qset[i]) }, bind)
	p.sql = b.String()
	return p
}

// column finds a writable column by name: a default column or a key column.
func (ti *typeInfo) column(name string) (column, bool) {
	for _, c := range ti.cols {
		if c.name == name {
			return c, true
		}
	}
	for _, c := range ti.keys {
		if c.name == name {
			return c, true
		}
	}
	return column{}, false
}

// Update writes the struct ptr points to into table with its version as the
// guard, in one round trip:
//
//	UPDATE "table" SET "a" = $1, "b" = $2, "version" = "version" + 1 WHERE "id" = $3 AND "version" = $4
//
// The struct needs a lock:"version" integer field and a key: fields tagged
// lock:"key", or else one field whose column is id. The columns are the
// struct's other mapped fields (db tags, as sqlx maps them), or those named
// with Columns. On success the struct's version is incremented; when no row
// has the key at that version it returns *versioned.StaleError
// (errors.Is(err, versioned.ErrStale)) and nothing changed, in the database
// or in the struct. A missing key (no key field, or a zero key value) is
// *versioned.KeyError (versioned.ErrNoKey) and nothing is sent; a version at
// its type's largest value is *versioned.OverflowError.
//
// A struct with a lock:"fence" field is written fenced with the fencing
// token the context carries ([sqlock.WithFencingToken]):
//
//	UPDATE "t" SET …, "version" = "version" + 1, "fence" = $2 WHERE "id" = $3 AND "version" = $4 AND COALESCE("fence", 0) <= $5
//
// A row a newer lock holder wrote is refused with *versioned.FencedError
// (versioned.ErrFenced), told apart from a stale or missing row by one
// query after the refusal; on success the field holds the token. With no
// token in the context it is *versioned.InputError
// (versioned.ErrInvalidArg) and nothing is sent.
func (h *Helper) Update(ctx context.Context, table string, ptr any, opts ...WriteOption) error {
	return h.write(ctx, "update", table, ptr, opts)
}

// Delete deletes the struct's row from table if it is still at the struct's
// version:
//
//	DELETE FROM "table" WHERE "id" = $1 AND "version" = $2
//
// and returns *versioned.StaleError when it is not (or is gone). The errors
// are Update's, and a lock:"fence" field makes it a fenced delete
// (… AND COALESCE("fence", 0) <= $3) as for Update.
func (h *Helper) Delete(ctx context.Context, table string, ptr any) error {
	return h.write(ctx, "delete", table, ptr, nil)
}

func (h *Helper) write(ctx context.Context, op string, table string, ptr any, opts []WriteOption) error {
	opName := op
	ex, err := h.execer(opName)
	if err != nil {
		return err
	}
	rv, err := structArg(opName, ptr)
	if err != nil {
		return err
	}
	p, err := h.s.plan(rv.Type().Elem(), table, op, opts)
	if err != nil {
		return err
	}
	ti := p.ti
	exp, err := ti.expected(rv, op)
	if err != nil {
		return err
	}
	key, err := ti.key(table, rv)
	if err != nil {
		return err
	}
	tok, err := ti.token(ctx, opName)
	if err != nil {
		return err
	}
	args := make([]any, 0, len(p.set)+len(ti.keys)+3)
	elem := rv.Elem()
	for _, idx := range p.set {
		args = append(args, readField(elem, idx))
	}
	if tok > 0 && op == "update" {
		args = append(args, tok)
	}
	args = appendKey(args, key)
	args = append(args, exp)
	if tok > 0 {
		args = append(args, tok)
	}
	res, err := ex.ExecContext(ctx, p.sql, args...)
	if err != nil {
		return fmt.Errorf("sqlxhelpers: %s %s: %w", opName, table, err)
	}
	if n, rerr := res.RowsAffected(); rerr != nil || n != 1 {
		g := vguard.Guard{Table: table, Key: key, Expected: exp, Op: op, Token: tok,
			Observer: h.s.cfg.observer, Source: "versioned", System: h.s.cfg.system}
		if tok > 0 {
			g.Probe = prober(ex, p.probe, appendKey(nil, key))
		}
		return g.Check(ctx, res, nil)
	}
	if tok > 0 && op == "update" {
		if err := ti.model.Fence.Set(rv, tok); err != nil {
			return err
		}
	}
	if op == "update" {
		return ti.setVersion(rv, exp+1)
	}
	return nil
}

// prober returns the probe of a fenced write that matched no row: the
// row's version and fence by key, on the write's own handle (inside its
// transaction). A handle that cannot query leaves the stale error
// unprobed, with the reason in ProbeErr.
func prober(ex Execer, query string, args []any) func(context.Context) (sql.NullInt64, sql.NullInt64, error) {
	return func(ctx context.Context) (ver, fence sql.NullInt64, err error) {
		q, ok := ex.(interface {
			QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		})
		if !ok {
			return ver, fence, fmt.Errorf("sqlxhelpers: %T cannot query, so a fenced row cannot be told from a stale one", ex)
		}
		err = q.QueryRowContext(ctx, query, args...).Scan(&ver, &fence)
		return ver, fence, err
	}
}
