package versioned

import (
	"github.com/sqlock/sqlock/internal/vmodel"
)

// Sentinels. Every error this package returns is one of the typed errors
// below, and each typed error matches exactly one sentinel with errors.Is.
var (
	// ErrStale: a versioned write matched no row at the expected version.
	// Returned as *StaleError. Package retry retries it, and any error that
	// wraps it with %w (as hand-written versioned SQL would return), like a
	// *StaleError.
	ErrStale = vmodel.ErrStale

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
	ErrKeyNotUnique = vmodel.ErrKeyNotUnique

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

// StaleError reports a versioned write that changed nothing because the row
// was not at the expected version (or is gone). Its fields: Table (as given
// to NewTable), Key (as given; a CompositeKey for several columns),
// Expected (the version the write expected), Op ("update" or "delete"),
// and what the probe found when probing was asked for ([WithProbe]):
// Probed (false when probing is off or the probe failed, ProbeErr), Gone
// (no row has the key any more), Current (the row's version when it is
// there; it equals Expected only for a row deleted and inserted again) and
// CurrentNull (the row's version is NULL, which never matches).
// errors.Is(err, ErrStale) is true for it, and it has RetryCause() ==
// "stale", which is how package retry recognises it as worth another
// attempt: re-read the row and try again.
type StaleError = vmodel.StaleError

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

// RowsError reports a write by key that affected more than one row (Rows),
// so the key columns (Table, Key) do not identify a row. errors.Is(err,
// ErrKeyNotUnique) is true for it.
type RowsError = vmodel.RowsError

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
