package lease

import (
	"fmt"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// Errors. Every error this package returns is an *Error matching one of
// these with errors.Is, or one of the shared sentinels of package sqlock
// (ErrNilHandle, ErrInvalidOption, ErrUnsupported), or carries the
// database's or the context's error as its cause. ErrNotAcquired,
// ErrTimeout and ErrLost also match sqlock's of the same name, and
// ErrInvalid and ErrTTLTooShort match sqlock.ErrInvalidArgument, as every
// lock backend's do.
var (
	// ErrNotAcquired: TryAcquire found the lease held by someone else.
	ErrNotAcquired = sentinels.NotAcquired
	// ErrTimeout: Acquire waited for its whole bound (WithTimeout, or the
	// context's deadline, which then — and only then — also matches
	// context.DeadlineExceeded) and the lease stayed held.
	ErrTimeout = sentinels.Timeout
	// ErrLost: the lease can no longer be trusted — it was not renewed in
	// time, the server no longer has it as this holder's, or it reached
	// its maximum hold time. Guard refuses with it.
	ErrLost = sentinels.Lost
	// ErrNotHeld: Release or Guard of a lease that was already released,
	// or a Release the server refused because the lease had expired or
	// been taken over (then nothing changed).
	ErrNotHeld = sentinels.NotHeld
	// ErrInvalid: an empty, over-long or non-UTF-8 lease name, or a TTL
	// under MinTTL. Nothing was sent. It matches [sqlock.ErrInvalidArgument]
	// too.
	ErrInvalid = sentinels.Invalid
	// ErrTTLTooShort: a TTL shorter than 8 of the fastest round trips the
	// Manager measured (after measuring once more): over this network a
	// renewal every TTL/3 would have no room to be retried. Round trips
	// were sent, nothing was written, and observers see the refusal. It is
	// a TTL too short to renew, so it matches [sqlock.ErrInvalidArgument]
	// as every backend's bad TTL does; it is not [ErrInvalid] (whose
	// "nothing was sent" would be untrue) nor ErrInvalidOption. It depends
	// on the network, not on the call alone: a faster round trip measured
	// later lets the same TTL through, and a longer TTL cures it.
	ErrTTLTooShort = errkind.New(sqlock.ErrInvalidArgument, "lease: TTL too short for the measured round trips")
	// ErrSchema: the leases table, or its waiters' queue or one of its
	// columns, is not in the database — most often a table made by an
	// older version of this package, before the queue and the holder
	// columns. [Migrate] (or the statements of [DDL]) adds what is missing
	// in place, keeping the rows. It matches [sqlock.ErrUnsupported]. Leases
	// granted before the upgrade still renew and release.
	ErrSchema = errkind.New(sqlock.ErrUnsupported, "lease: the table's schema is not this version's")
)

// sentinels are the errors every TTL lock backend reports, in this
// package's words.
var sentinels = ttllock.NewSentinels("lease", "lease", "name")

// Error is the error type of this package.
type Error struct {
	Op    string // "acquire", "tryacquire", "renew", "hold", "release", "guard", "new", "migrate"
	Name  string // the lease name, "" when not applicable
	Err   error  // one of the sentinels above, or nil
	Cause error  // the underlying error (database, context, detail), or nil
}

func (e *Error) Error() string { return ttllock.ErrorText("lease", e.Op, e.Name, e.Err, e.Cause) }

// Unwrap returns the sentinel and the cause, so errors.Is and errors.As see
// both.
func (e *Error) Unwrap() []error { return ttllock.Unwrap(e.Err, e.Cause) }

// schemaError names the cure of an acquisition that failed because a
// table or a column is missing (SQLSTATE 42P01, 42703): Migrate.
func schemaError(t tableName, err error) error {
	switch pgerror.Code(err) {
	case "42P01", "42703":
		return ttllock.Refuse(ErrSchema, fmt.Errorf("%s or its queue %s lacks what this version needs "+
			"(made by an older version?): run lease.Migrate or the statements of lease.DDL: %w", t.table(), t.waiters(), err))
	}
	return err
}

// permanent reports whether a renewal error will not go away by trying
// again: the statement itself is wrong for this database (the table was
// dropped, a privilege revoked, a constraint broken).
func permanent(err error) bool {
	switch code := pgerror.Code(err); {
	case len(code) < 2:
		return false
	default:
		switch code[:2] {
		case "22", "23", "42", "44": // data, integrity, syntax/access, check option
			return true
		}
		return false
	}
}
