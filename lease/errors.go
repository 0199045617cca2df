package lease

import (
	"context"
	"errors"
	"strings"

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
	ErrNotAcquired = errkind.New(sqlock.ErrNotAcquired, "lease: held by someone else")
	// ErrTimeout: Acquire waited for its whole bound (WithTimeout, or the
	// context's deadline, which then — and only then — also matches
	// context.DeadlineExceeded) and the lease stayed held.
	ErrTimeout = errkind.New(sqlock.ErrTimeout, "lease: timed out waiting for the lease")
	// ErrLost: the lease can no longer be trusted — it was not renewed in
	// time, the server no longer has it as this holder's, or it reached
	// its maximum hold time. Guard refuses with it.
	ErrLost = errkind.New(sqlock.ErrLost, "lease: lost")
	// ErrNotHeld: Release or Guard of a lease that was already released,
	// or a Release the server refused because the lease had expired or
	// been taken over (then nothing changed).
	ErrNotHeld = errors.New("lease: not held")
	// ErrInvalid: an empty, over-long or non-UTF-8 lease name, or a TTL
	// under MinTTL. Nothing was sent. It matches [sqlock.ErrInvalidArgument]
	// too.
	ErrInvalid = errkind.New(sqlock.ErrInvalidArgument, "lease: invalid name or TTL")
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
)

// Error is the error type of this package.
type Error struct {
	Op    string // "acquire", "tryacquire", "renew", "hold", "release", "guard", "new", "migrate"
	Name  string // the lease name, "" when not applicable
	Err   error  // one of the sentinels above, or nil
	Cause error  // the underlying error (database, context, detail), or nil
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("lease: ")
	b.WriteString(e.Op)
	if e.Name != "" {
		b.WriteString(" ")
		b.WriteString(quoteName(e.Name))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(e.Err.Error(), "lease: "))
	}
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

// Unwrap returns the sentinel and the cause, so errors.Is and errors.As see
// both.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// quoteName shows a name in an error, cut to a readable length.
func quoteName(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "…"
	}
	return `"` + s + `"`
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

// ctxError turns the end of an acquisition's context into an error: a
// wait that ran out is ErrTimeout — matching context.DeadlineExceeded only
// when the caller's deadline, not WithTimeout, ended it — and a
// cancellation is the context's cause.
func ctxError(op, name string, ctx context.Context) error {
	if timedOut, cause := ttllock.WaitEnd(ctx); timedOut {
		return &Error{Op: op, Name: name, Err: ErrTimeout, Cause: cause}
	}
	return &Error{Op: op, Name: name, Cause: context.Cause(ctx)}
}
