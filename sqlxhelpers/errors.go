package sqlxhelpers

import (
	"errors"
	"reflect"
	"strconv"
)

// ErrRewrite matches every *RewriteError: the statement could not be guarded
// with certainty, so nothing was sent to the database. Each RewriteError
// also matches exactly one of the reason sentinels below.
var ErrRewrite = errors.New("sqlxhelpers: statement cannot be guarded")

// Reasons a statement is refused. Each is the Kind of a *RewriteError and
// matches it with errors.Is.
var (
	// ErrNotWrite: the statement is not an UPDATE or a DELETE (or is
	// empty).
	ErrNotWrite = errors.New("sqlxhelpers: not an UPDATE or DELETE")
	// ErrNoWhere: the statement has no top-level WHERE clause. A WHERE
	// inside a subquery does not count.
	ErrNoWhere = errors.New("sqlxhelpers: no top-level WHERE clause")
	// ErrCTE: a WITH clause that is not a plain read-only one: a
	// data-modifying CTE (INSERT, UPDATE, DELETE, MERGE inside), SEARCH
	// or CYCLE clauses, or a shape the rewriter does not know.
	ErrCTE = errors.New("sqlxhelpers: unsupported WITH clause")
	// ErrMultipleStatements: a top-level ';' followed by more SQL.
	ErrMultipleStatements = errors.New("sqlxhelpers: several statements")
	// ErrVersionAssigned: the statement already assigns the version
	// column; the guard does that itself.
	ErrVersionAssigned = errors.New("sqlxhelpers: statement assigns the version column")
	// ErrUnbalanced: an unterminated string, quoted identifier, comment or
	// dollar quote, or unbalanced parentheses or brackets.
	ErrUnbalanced = errors.New("sqlxhelpers: unbalanced quotes, comments or parentheses")
	// ErrPositional: a positional parameter ($1, or ? for drivers whose
	// bind variable is ?) in a statement that uses named parameters.
	ErrPositional = errors.New("sqlxhelpers: positional parameter in a named statement")
	// ErrAmbiguousString: a backslash inside a standard '…' string, whose
	// meaning depends on the server's standard_conforming_strings (off,
	// the backslash escapes the closing quote and the rest of the
	// statement becomes part of the string). Write E'…' strings instead.
	ErrAmbiguousString = errors.New("sqlxhelpers: backslash in a standard string literal")
	// ErrUnsupported: valid SQL the rewriter does not guard, such as
	// WHERE CURRENT OF, or top-level clauses after WHERE that PostgreSQL
	// does not have for UPDATE or DELETE (ORDER BY, LIMIT, …).
	ErrUnsupported = errors.New("sqlxhelpers: unsupported statement shape")
	// ErrSyntax: the statement is malformed where the rewriter must
	// understand it (the target table, the SET list, an empty WHERE, a
	// stray '$' …).
	ErrSyntax = errors.New("sqlxhelpers: malformed statement")
	// ErrSpec: the guard itself cannot be written: an empty or invalid
	// version column or parameter name.
	ErrSpec = errors.New("sqlxhelpers: invalid guard specification")
)

// RewriteError reports a statement the rewriter refused. Nothing was sent to
// the database. errors.Is(err, ErrRewrite) and errors.Is(err, e.Kind) hold.
type RewriteError struct {
	Kind   error  // one of the reason sentinels (ErrNoWhere, ErrCTE, …)
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

// Is makes errors.Is true for ErrRewrite and for the error's Kind.
func (e *RewriteError) Is(target error) bool { return target == ErrRewrite || target == e.Kind }

// Unwrap returns the Kind.
func (e *RewriteError) Unwrap() error { return e.Kind }

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
