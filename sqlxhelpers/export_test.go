package sqlxhelpers

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/sqlock/sqlock/versioned"
)

// Test-only views of the rewriter and of the statements a Helper builds,
// for the tests that pin their text and fuzz them.

type (
	Spec    = guardSpec
	Guarded = guarded
)

// Rewrite is the rewriter itself: pure, uncached.
func Rewrite(query string, spec Spec) (*Guarded, error) { return rewriteQuery(query, spec) }

// KindOf returns the Kind of the *RewriteError in err's chain, or "".
func KindOf(err error) string {
	var re *RewriteError
	if errors.As(err, &re) {
		return re.Kind
	}
	return ""
}

// Rewrite returns the guarded form of query for arg's type, as NamedExec
// would run it, through h's cache.
func (h *Helper) Rewrite(query string, arg any) (*Guarded, error) {
	t := reflect.TypeOf(arg)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, &BindError{Type: reflect.TypeOf(arg), Reason: "not a struct or a pointer to one"}
	}
	p, err := h.s.named(t, query)
	if err != nil {
		return nil, err
	}
	return p.g, nil
}

// UpdateSQL returns the statement Update runs for ptr's type.
func (h *Helper) UpdateSQL(table string, ptr any, opts ...WriteOption) (string, error) {
	return h.sqlFor("update", table, ptr, opts)
}

// DeleteSQL returns the statement Delete runs for ptr's type.
func (h *Helper) DeleteSQL(table string, ptr any) (string, error) {
	return h.sqlFor("delete", table, ptr, nil)
}

func (h *Helper) sqlFor(op, table string, ptr any, opts []WriteOption) (string, error) {
	t := reflect.TypeOf(ptr)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return "", &versioned.InputError{Op: op, Arg: "value",
			Reason: fmt.Sprintf("%T is not a struct or a pointer to one", ptr), Kind: versioned.ErrInvalidArg}
	}
	p, err := h.s.plan(t, table, op, opts)
	if err != nil {
		return "", err
	}
	return p.sql, nil
}
