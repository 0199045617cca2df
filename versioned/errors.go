package versioned

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sqlock/sqlock/internal/vmodel"
)

// Sentinels. Every error this package returns is one of the typed errors
// below, and each typed error matches exactly one sentinel with errors.Is.
var (
	// ErrStale: a versioned write matched no row at the expected version.
	// Returned as *StaleError. Package retry retries it, and any error that
	// wraps it with %w (as hand-written versioned SQL would return), like a
	// *StaleError.
	ErrStale error = &retryableSentinel{"versioned: stale version", "stale"}

	// ErrOverflow: the next version does not fit the version's type, or a
	// version value is outside the range the type (or database/sql) can
	// carry. Returned as *OverflowError. Nothing is sent to the database.
	ErrOverflow = vmodel.ErrOverflow

	// ErrNoKey: a write has no key value to target (nil, a nil pointer, a
	// zero value, a NULL driver.Valuer, a composite key of the wrong
	// length, or a struct whose key fields do not match the Table's key
	// columns by name). The statement is never widened to every row with
	// that version, nor sent to another row. Returned as *KeyError.
	ErrNoKey = vmodel.ErrNoKey

	// ErrFenced: a fenced write ([Fence], or a struct with a lock:"fence"
	// field) was refused because the row's fence is past the writer's
	// fencing token: a newer lock holder has written the row, so the
	// writer's lock is lost. Returned as *FencedError. It is not a stale
	// version and package retry does not retry it: stop, and do not write
	// again under the same token.
	ErrFenced = vmodel.ErrFenced

	// ErrKeyNotUnique: a write by key affected more than one row, so the
	// key columns do not identify a row. Returned as *RowsError. The
	// statement has run: roll back the transaction it ran in.
	ErrKeyNotUnique = errors.New("versioned: key matched more than one row")

	// ErrInvalidModel: a struct's lock tags cannot be used: it has no
	// lock:"version" field, a version field that is not a plain integer,
	// two version fields, an unknown tag option … Returned as *TagError.
	ErrInvalidModel = vmodel.ErrInvalidModel

	// ErrInvalidArg: an argument a call cannot honour (a nil Table, an
	// empty or invalid table or column name, an assignment to the version
	// column, a duplicate column, a compare-and-swap without a compare or
	// without a swap …). Returned as *InputError. A nil database handle is
	// an *InputError too, matching [sqlock.ErrNilHandle] instead.
	ErrInvalidArg = vmodel.ErrInvalidArg
)

// retryableSentinel is a sentinel with a RetryCause, the method by which
// package retry (which imports nothing of this package) recognises an error
// worth another attempt.
type retryableSentinel struct{ msg, cause string }

func (e *retryableSentinel) Error() string      { return e.msg }
func (e *retryableSentinel) RetryCause() string { return e.cause }

// StaleError reports a versioned write that changed nothing because the row
// was not at the expected version (or is gone). errors.Is(err, ErrStale) is
// true for it, and it has RetryCause() == "stale", which is how package
// retry recognises it as worth another attempt: re-read the row and try
// again.
type StaleError struct {
	Table    string // the table as given to NewTable
	Key      any    // the key value as given (a CompositeKey for several columns)
	Expected int64  // the version the write expected
	Op       string // "update" or "delete"

	// What the probe found, set only when probing was asked for
	// (WithProbe). Probed is false when probing is off or the probe itself
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
	b.WriteString(formatKey(e.Key))
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

// FencedError reports a fenced write that changed nothing because the
// row's fence is past the write's token: a newer lock holder wrote it. Its
// fields: Table, Key, Op ("update" or "delete"), Token (the fencing token
// the write carried) and Current (the row's fence, larger than Token).
// errors.Is(err, ErrFenced) is true for it; errors.Is(err, ErrStale) is
// not, whatever the row's version.
type FencedError = vmodel.FencedError

// OverflowError reports a version that cannot be incremented, or a value that
// does not fit the version's type. Nothing was sent to the database. Its
// fields: Type (the version's Go type, "int8", "uint64" …), Value (the
// offending value, in decimal), Min and Max (the range the type holds here).
// errors.Is(err, ErrOverflow) is true for it.
type OverflowError = vmodel.OverflowError

// KeyError reports a missing key value: the write was refused, nothing was
// sent. Its fields: Table, Column (the key column with no value or no
// matching field; "" when the key's shape is wrong) and Reason.
// errors.Is(err, ErrNoKey) is true for it.
type KeyError = vmodel.KeyError

// RowsError reports a write by key that affected more than one row.
type RowsError struct {
	Table string
	Key   any
	Rows  int64
}

func (e *RowsError) Error() string {
	return fmt.Sprintf("versioned: key %s of %s matched %d rows; key columns must be unique",
		formatKey(e.Key), e.Table, e.Rows)
}

// Is makes errors.Is(err, ErrKeyNotUnique) true.
func (e *RowsError) Is(target error) bool { return target == ErrKeyNotUnique }

// TagError reports a struct type whose lock tags cannot be used, the first
// time the type is seen (the verdict is cached with the type). Its fields:
// Type (the struct type), Field (the Go field name, "" for the type as a
// whole), Tag (the lock tag's value) and Reason. errors.Is(err,
// ErrInvalidModel) is true for it.
type TagError = vmodel.TagError

// InputError reports a bad argument: a nil handle, an invalid identifier,
// or another argument the call cannot honour. Nothing was sent. Its fields:
// Op (the call: "update", "delete", "compare-and-swap", "table"), Arg
// (which argument: "db", "table", "column", "set" …), Reason, and Kind
// ([sqlock.ErrNilHandle] or [ErrInvalidArg]), which errors.Is matches.
type InputError = vmodel.InputError

func inputErr(op, arg, reason string, kind error) error {
	return vmodel.InputErr(op, arg, reason, kind)
}

// formatKey prints a key for messages: strings quoted, byte slices in hex,
// composite keys in parentheses.
func formatKey(k any) string { return vmodel.FormatKey(k) }
