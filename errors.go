package sqlock

import "errors"

// The conditions every package reports the same way. Each is a refusal made
// before anything reaches the database: retrying the same call cannot help.
var (
	// ErrNilHandle: a nil database handle, pool, transaction or function
	// was passed where one is required.
	ErrNilHandle = errors.New("sqlock: nil handle")

	// ErrInvalidArgument: an argument of the call itself is outside what the
	// call accepts: an empty or oversized lock name, a key the backend cannot
	// store, a TTL too short to renew or too long to represent. Every
	// backend's own bad-input errors match it, beside their own sentinels.
	ErrInvalidArgument = errors.New("sqlock: invalid argument")

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
