package sqlxhelpers

import (
	"context"
	"fmt"
	"reflect"

	"github.com/sqlock/sqlock/internal/vguard"
)

type rewriteKey struct {
	t     reflect.Type
	query string
}

// namedPlan is a rewritten statement bound to a struct type: the guarded SQL
// and, per bind variable, the field it reads.
type namedPlan struct {
	ti  *typeInfo
	g   *guarded
	idx [][]int // the field index per parameter; unused at g.VersionArg
	err error
}

func (s *state) named(t reflect.Type, query string) (*namedPlan, error) {
	k := rewriteKey{t: t, query: query}
	if p, ok := s.rewrites.get(k); ok {
		return p, p.err
	}
	p := s.buildNamed(t, query)
	p = s.rewrites.put(k, p)
	return p, p.err
}

func (s *state) buildNamed(t reflect.Type, query string) *namedPlan {
	p := &namedPlan{}
	ti, err := s.typeInfo(t)
	if err != nil {
		p.err = err
		return p
	}
	p.ti = ti
	g, err := rewriteQuery(query, ti.spec(s.cfg.bindType, s.cfg.quoteChar == '`'))
	if err != nil {
		p.err = err
		return p
	}
	p.g = g
	sm := s.cfg.mapper.TypeMap(t)
	p.idx = make([][]int, len(g.Params))
	for i, name := range g.Params {
		if i == g.VersionArg {
			continue
		}
		fi, ok := sm.Names[name]
		if !ok {
			p.err = &BindError{Param: name, Type: t, Reason: "no field maps to this name"}
			return p
		}
		p.idx[i] = fi.Index
	}
	return p
}

func (ti *typeInfo) spec(bindType int, mysql bool) guardSpec {
	return guardSpec{VersionColumn: ti.version.name, VersionParam: ti.versionParam, BindType: bindType, MySQL: mysql}
}

// NamedExec runs a hand-written named UPDATE or DELETE (sqlx :name
// parameters) with a version guard added: the version column is incremented
// by an UPDATE, and the top-level WHERE becomes
//
//	WHERE (<your condition>) AND "version" = :version
//
// with the expected version taken from arg's lock:"version" field. arg must
// be a pointer to the struct. On success an UPDATE increments the struct's
// version; when no row matched it returns *versioned.StaleError
// (errors.Is(err, versioned.ErrStale)), and when several rows matched,
// *versioned.RowsError after the statement ran (run it in a transaction to
// roll that back). A statement the rewriter cannot guard with certainty is
// *RewriteError (errors.Is(err, ErrRewrite)), a parameter no field maps to is
// *BindError; in both cases nothing is sent. See the package documentation for the grammar.
func (h *Helper) NamedExec(ctx context.Context, query string, arg any) error {
	ex, err := h.execer("exec")
	if err != nil {
		return err
	}
	rv, err := structArg("exec", arg)
	if err != nil {
		return err
	}
	p, err := h.s.named(rv.Type().Elem(), query)
	if err != nil {
		return err
	}
	ti := p.ti
	exp, err := ti.expected(rv, p.g.Op)
	if err != nil {
		return err
	}
	elem := rv.Elem()
	args := make([]any, len(p.idx))
	for i := range p.idx {
		if i == p.g.VersionArg {
			args[i] = exp
		} else {
			args[i] = readField(elem, p.idx[i])
		}
	}
	res, err := ex.ExecContext(ctx, p.g.SQL, args...)
	if err != nil {
		return fmt.Errorf("sqlxhelpers: %s %s: %w", p.g.Op, p.g.Table, err)
	}
	if n, rerr := res.RowsAffected(); rerr != nil || n != 1 {
		// The key is for the error only (the statement's WHERE is the
		// user's), so it is read only when there is an error to report.
		var key any
		if len(p.ti.keys) > 0 {
			key, _ = p.ti.key(p.g.Table, rv)
		}
		g := vguard.Guard{Table: p.g.Table, Key: key, Expected: exp, Op: p.g.Op,
			Observer: h.s.cfg.observer, Source: "versioned", System: h.s.cfg.system}
		return g.Check(ctx, res, nil)
	}
	if p.g.Op == "update" {
		return ti.setVersion(rv, exp+1)
	}
	return nil
}
