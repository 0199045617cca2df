package sqlock

import "errors"

// The conditions every package reports the same way. Each is a refusal made
// before anything reaches the database: retrying the same call cannot help.
var (
	// ErrNilHandle: a nil database handle, pool, transaction or function
	// was passed where one is required.
	ErrNilHandle = errors.New("sqlock: nil handle")

	// ErrInvalidOption: an option was given a value outside its range. A
	// timeout is a positive duration in every package: zero and negative
	// durations are refused, never read as "wait forever" or "the default".
	ErrInvalidOption = errors.New("sqlock: invalid option")

	// ErrUnsupported: the call cannot keep its package's promise on this
	// server, pooler, driver or statement shape (a session lock through
	// PgBouncer in transaction mode, a write GORM builds in a way the version
	// guard cannot see), so it is refused rather than run without the
	// guarantee.
	ErrUnsupported = errors.New("sqlock: unsupported")
)
