package vmodel

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// The sentinels and error types of a struct model. Package versioned
// re-exports them under the same names (its ErrOverflow is this
// ErrOverflow, its *TagError this *TagError), so errors.Is and errors.As
// work the same whichever package returned the error.
//
// A nil handle is reported with sqlock.ErrNilHandle as the Kind of an
// *InputError; an identifier no dialect can quote is ErrInvalidArg.
var (
	ErrOverflow     = errors.New("versioned: version overflow")
	ErrNoKey        = errors.New("versioned: missing key value")
	ErrInvalidModel = errors.New("versioned: invalid model")
	ErrInvalidArg   = errors.New("versioned: invalid argument")
	ErrFenced       = errors.New("versioned: fenced out by a newer lock holder")
	ErrKeyNotUnique = errors.New("versioned: key matched more than one row")

	// ErrStale is a sentinel with a RetryCause, the method by which
	// package retry (which imports nothing of this package) recognises an
	// error worth another attempt.
	ErrStale error = &retryableSentinel{"versioned: stale version", "stale"}
)

type retryableSentinel struct{ msg, cause string }

func (e *retryableSentinel) Error() string      { return e.msg }
func (e *retryableSentinel) RetryCause() string { return e.cause }

// StaleError reports a versioned write that changed nothing because the row
// was not at the expected version (or is gone). errors.Is(err, ErrStale) is
// true for it, and it has RetryCause() == "stale", which is how package
// retry recognises it as worth another attempt: re-read the row and try
// again.
type StaleError struct {
	Table    string // the table as the caller named it
	Key      any    // the key value as given (a composite key for several columns)
	Expected int64  // the version the write expected
	Op       string // "update" or "delete"

	// What the probe (a read of the row by key after the write) found,
	// set only when the write was probed. Probed is false when probing is off or the probe itself
	// failed (ProbeErr).
	Probed bool
	// Gone: no row has the key any more (it was deleted, or never existed).
	Gone bool
	// Current is the row's version when the row is there (not Gone). It
	// can equal Expected only for a row deleted and inserted again.
	Current int64
	// CurrentNull: the row's version is NULL (Current is 0). NULL never
	// equals an expected version: make the column NOT NULL.
	CurrentNull bool
	ProbeErr    error // the probe's own error, when it failed
}

func (e *StaleError) Error() string {
	var b strings.Builder
	b.WriteString("versioned: stale version: ")
	b.WriteString(e.Op)
	b.WriteString(" of ")
	b.WriteString(e.Table)
	b.WriteString(" key ")
	b.WriteString(FormatKey(e.Key))
	b.WriteString(" at version ")
	b.WriteString(strconv.FormatInt(e.Expected, 10))
	switch {
	case e.Probed && e.Gone:
		b.WriteString(": row is gone")
	case e.Probed && e.CurrentNull:
		b.WriteString(": the row's version is NULL, which never matches (make the column NOT NULL)")
	case e.Probed && e.Current != e.Expected:
		b.WriteString(": row is now at version ")
		b.WriteString(strconv.FormatInt(e.Current, 10))
	case e.Probed:
		b.WriteString(": row is still at that version (another condition failed)")
	default:
		if e.ProbeErr != nil {
			b.WriteString(" (probe failed: ")
			b.WriteString(e.ProbeErr.Error())
			b.WriteString(")")
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// RetryCause returns "stale": the contract by which package retry (which
// imports nothing of this package) retries a stale write.
func (e *StaleError) RetryCause() string { return "stale" }

// RowsError reports a write by key that affected more than one row.
type RowsError struct {
	Table string
	Key   any
	Rows  int64
}

func (e *RowsError) Error() string {
	return fmt.Sprintf("versioned: key %s of %s matched %d rows; key columns must be unique",
		FormatKey(e.Key), e.Table, e.Rows)
}

// Is makes errors.Is(err, ErrKeyNotUnique) true.
func (e *RowsError) Is(target error) bool { return target == ErrKeyNotUnique }

// FencedError reports a fenced write that changed nothing because the
// row's fence is past the write's token: a newer lock holder wrote it.
type FencedError struct {
	Table   string // the table as the caller named it
	Key     any    // the key value as given
	Op      string // "update" or "delete"
	Token   int64  // the fencing token the write carried
	Current int64  // the row's fence, larger than Token
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("versioned: fenced out: %s of %s key %s with fencing token %d: the row's fence is %d (a newer lock holder wrote it)",
		e.Op, e.Table, FormatKey(e.Key), e.Token, e.Current)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// FormatKey prints a key for messages: strings quoted, byte slices in hex,
// composite keys (a slice of any, such as versioned.CompositeKey) in
// parentheses.
func FormatKey(k any) string {
	switch v := k.(type) {
	case nil:
		return "<nil>"
	case string:
		return strconv.Quote(v)
	case []byte:
		return fmt.Sprintf("%x", v)
	}
	if rv := reflect.ValueOf(k); rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Interface {
		parts := make([]string, rv.Len())
		for i := range parts {
			parts[i] = FormatKey(rv.Index(i).Interface())
		}
		return "(" + strings.Join(parts, ", ") + ")"
	}
	return fmt.Sprint(k) // fmt recovers from a panicking String method
}

// OverflowError reports a version that cannot be incremented, or a value that
// does not fit the version's type. Nothing was sent to the database.
type OverflowError struct {
	Type  string // the Go type of the version ("int8", "uint64", …)
	Value string // the offending value, in decimal
	Max   int64  // the largest version the type can take here
	Min   int64  // the smallest
}

func (e *OverflowError) Error() string {
	return fmt.Sprintf("versioned: version overflow: %s does not fit or cannot be incremented within %s [%d, %d]",
		e.Value, e.Type, e.Min, e.Max)
}

// Is makes errors.Is(err, ErrOverflow) true.
func (e *OverflowError) Is(target error) bool { return target == ErrOverflow }

// KeyError reports a missing key value: the write was refused, nothing was
// sent.
type KeyError struct {
	Table  string
	Column string // the key column with no value or no matching field ("" when the key's shape is wrong)
	Reason string
}

func (e *KeyError) Error() string {
	s := "versioned: missing key value for " + e.Table
	if e.Column != "" {
		s += "." + e.Column
	}
	return s + ": " + e.Reason
}

// Is makes errors.Is(err, ErrNoKey) true.
func (e *KeyError) Is(target error) bool { return target == ErrNoKey }

// TagError reports a struct type whose lock tags cannot be used, the first
// time the type is seen (the verdict is cached with the type).
type TagError struct {
	Type   reflect.Type // the struct type
	Field  string       // the Go field name ("" for the type as a whole)
	Tag    string       // the lock tag's value, when there is one
	Reason string
}

func (e *TagError) Error() string {
	var b strings.Builder
	b.WriteString("versioned: ")
	if e.Type != nil {
		b.WriteString(e.Type.String())
	} else {
		b.WriteString("<nil type>")
	}
	if e.Field != "" {
		b.WriteString(".")
		b.WriteString(e.Field)
	}
	if e.Tag != "" {
		b.WriteString(` lock:"`)
		b.WriteString(e.Tag)
		b.WriteString(`"`)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidModel) true, whether the tags are wrong
// or the type has no version field at all.
func (e *TagError) Is(target error) bool { return target == ErrInvalidModel }

// InputError reports a bad argument: a nil handle, an invalid identifier,
// or another argument the call cannot honour. Nothing was sent.
type InputError struct {
	Op     string // the call: "update", "delete", "compare-and-swap", "table", "check", "quote"
	Arg    string // which argument: "db", "table", "column", "set", …
	Reason string
	Kind   error // sqlock.ErrNilHandle or ErrInvalidArg
}

func (e *InputError) Error() string {
	return "versioned: " + e.Op + ": " + e.Arg + ": " + e.Reason
}

// Is makes errors.Is(err, e.Kind) true.
func (e *InputError) Is(target error) bool { return target == e.Kind }

// Unwrap returns the sentinel.
func (e *InputError) Unwrap() error { return e.Kind }

// InputErr returns an *InputError.
func InputErr(op, arg, reason string, kind error) error {
	return &InputError{Op: op, Arg: arg, Reason: reason, Kind: kind}
}
