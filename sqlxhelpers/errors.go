package sqlxhelpers

import (
	"errors"
	"reflect"
	"strconv"

	"github.com/sqlock/sqlock"
)

// ErrRewrite matches every *RewriteError: the statement could not be guarded
// with certainty, so nothing was sent to the database.
var ErrRewrite = errors.New("sqlxhelpers: statement cannot be guarded")

// The kinds of *RewriteError, its Kind field.
const (
	// kindNotWrite: not an UPDATE or a DELETE (or empty).
	kindNotWrite = "not-write"
	// kindNoWhere: no top-level WHERE clause (one inside a subquery does
	// not count).
	kindNoWhere = "no-where"
	// kindCTE: a WITH clause that is not a plain read-only one: a
	// data-modifying CTE, SEARCH or CYCLE, or a shape the rewriter does
	// not know.
	kindCTE = "cte"
	// kindMultipleStatements: a top-level ';' followed by more SQL.
	kindMultipleStatements = "multiple-statements"
	// kindVersionAssigned: the statement assigns the version column; the
	// guard does that itself.
	kindVersionAssigned = "version-assigned"
	// kindUnbalanced: an unterminated string, quoted identifier, comment or
	// dollar quote, or unbalanced parentheses or brackets.
	kindUnbalanced = "unbalanced"
	// kindPositional: a positional parameter ($1, or ? for drivers whose
	// bind variable is ?) in a named statement.
	kindPositional = "positional"
	// kindAmbiguousString: a backslash inside a standard '…' string, whose
	// meaning depends on standard_conforming_strings.
	kindAmbiguousString = "ambiguous-string"
	// kindUnsupported: valid SQL the rewriter does not guard (WHERE
	// CURRENT OF, ORDER BY or LIMIT after WHERE …).
	kindUnsupported = "unsupported"
	// kindSyntax: malformed where the rewriter must understand it.
	kindSyntax = "syntax"
	// kindSpec: the guard itself cannot be written (an invalid version
	// column or parameter name, an unknown bind type).
	kindSpec = "spec"
)

// RewriteError reports a statement the rewriter refused. Nothing was sent to
// the database. errors.Is(err, ErrRewrite) holds, and so does
// errors.Is(err, [sqlock.ErrUnsupported]) when Kind is "unsupported".
//
// Kind says why, in a fixed vocabulary: "not-write" (not an UPDATE or
// DELETE), "no-where" (no top-level WHERE), "cte" (a data-modifying,
// SEARCH or CYCLE CTE), "multiple-statements", "version-assigned" (the
// statement assigns the version column itself), "unbalanced" (quotes,
// comments, parentheses), "positional" ($1, or ? for drivers that bind
// with ?), "ambiguous-string" (a backslash in a standard '…' string, whose
// meaning depends on standard_conforming_strings), "unsupported" (valid
// SQL the rewriter does not guard: WHERE CURRENT OF, ORDER BY or LIMIT
// after WHERE …), "syntax" (malformed where the rewriter must understand
// it) and "spec" (the version field's column or parameter name cannot be
// written into a guard).
type RewriteError struct {
	Kind   string // why, from the vocabulary above
	Offset int    // byte offset in Query where the problem was found (-1 when not about a place)
	Reason string // a human explanation
	Query  string // the statement as given
}

func (e *RewriteError) Error() string {
	s := "sqlxhelpers: cannot guard statement: " + e.Reason
	if e.Offset >= 0 {
		s += " (at byte " + strconv.Itoa(e.Offset) + ")"
	}
	return s
}

// Is makes errors.Is true for ErrRewrite, and for sqlock.ErrUnsupported
// when the statement is valid SQL the rewriter does not guard.
func (e *RewriteError) Is(target error) bool {
	return target == ErrRewrite || (target == sqlock.ErrUnsupported && e.Kind == kindUnsupported)
}

// ErrBind matches every *BindError: a named parameter of the statement has no
// field in the argument, or the argument is not a struct the statement can be
// bound to. Nothing was sent.
var ErrBind = errors.New("sqlxhelpers: cannot bind statement")

// BindError reports a named parameter with no matching field.
type BindError struct {
	Param  string       // the parameter name ("" when the argument itself is wrong)
	Type   reflect.Type // the argument's type
	Reason string
}

func (e *BindError) Error() string {
	s := "sqlxhelpers: cannot bind"
	if e.Param != "" {
		s += " :" + e.Param
	}
	if e.Type != nil {
		s += " to " + e.Type.String()
	}
	return s + ": " + e.Reason
}

// Is makes errors.Is(err, ErrBind) true.
func (e *BindError) Is(target error) bool { return target == ErrBind }
