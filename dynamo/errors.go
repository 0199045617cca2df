package dynamo

import (
	"context"
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// Errors. Every error this package returns is an *Error matching one of
// these with errors.Is, or one of versioned's typed errors
// (*versioned.StaleError, *versioned.FencedError), or one of the shared
// sentinels of package sqlock (ErrNilHandle, ErrInvalidOption), or carries
// the SDK's or the context's error as its cause. ErrNotAcquired,
// ErrTimeout, ErrLost and ErrInvalid also match sqlock's sentinels of the
// same meaning, as every backend's do.
var (
	// ErrNotAcquired: TryAcquire found the lock held by someone else.
	ErrNotAcquired = errkind.New(sqlock.ErrNotAcquired, "dynamo: held by someone else")
	// ErrTimeout: Acquire waited for its whole bound (WithTimeout, or the
	// context's deadline, which then — and only then — also matches
	// context.DeadlineExceeded) without getting the lock.
	ErrTimeout = errkind.New(sqlock.ErrTimeout, "dynamo: timed out waiting for the lock")
	// ErrLost: the lock can no longer be trusted — no renewal was
	// confirmed before its local deadline, or the table no longer has it
	// as this holder's.
	ErrLost = errkind.New(sqlock.ErrLost, "dynamo: lost")
	// ErrNotHeld: Release of a lock that was already released, or that the
	// table no longer had as this holder's; nothing changed.
	ErrNotHeld = errors.New("dynamo: not held")
	// ErrInvalid: an argument the call cannot honour (an empty or
	// oversized lock name, a TTL shorter than MinTTL, an empty attribute
	// name, an assignment to a key attribute, a key of the wrong shape …).
	// Nothing was sent. It matches sqlock.ErrInvalidArgument.
	ErrInvalid = errkind.New(sqlock.ErrInvalidArgument, "dynamo: invalid argument")
	// ErrMissing: a fenced write found no item with the key; nothing was
	// written (a fenced write never creates an item).
	ErrMissing = errors.New("dynamo: no item has the key")
)

// Error is the error type of this package.
type Error struct {
	Op    string // "acquire", "tryacquire", "hold", "release", "compare-and-swap", "update", "put", "create-table" …
	Table string // the table
	Name  string // the lock's name, "" when not applicable
	Err   error  // one of the sentinels above, or nil
	Cause error  // the underlying error (the SDK's, the context's, a detail), or nil
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("dynamo: ")
	b.WriteString(e.Op)
	if e.Table != "" {
		b.WriteString(" on ")
		b.WriteString(e.Table)
	}
	if e.Name != "" {
		b.WriteString(" ")
		b.WriteString(quote(e.Name))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(e.Err.Error(), "dynamo: "))
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
	out := make([]error, 0, 2)
	if e.Err != nil {
		out = append(out, e.Err)
	}
	if e.Cause != nil {
		out = append(out, e.Cause)
	}
	return out
}

// quote shows a name in an error, cut to a readable length.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "…"
	}
	return `"` + s + `"`
}

// conditionFailed classifies the SDK's error once: a conditional write
// whose condition was false (the only refusal this package expects), and
// the item DynamoDB attached to it, if any. Every other error — throttling
// and ProvisionedThroughputExceeded included, which the client's retryer
// has already retried with backoff — is returned wrapped.
func conditionFailed(err error) (failed bool, item map[string]types.AttributeValue) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return true, ccf.Item
	}
	return false, nil
}

// invalid is a refusal of bad input.
func invalid(op, table, name, reason string) error {
	return &Error{Op: op, Table: table, Name: name, Err: ErrInvalid, Cause: errors.New(reason)}
}

// ctxError turns the end of an acquisition's context into an error: a
// wait that ran out is ErrTimeout — matching context.DeadlineExceeded only
// when the caller's deadline, not WithTimeout, ended it — and a
// cancellation is the context's cause. last, when not nil, is the last
// attempt's failure.
func ctxError(op, table, name string, ctx context.Context, last error) error {
	timedOut, cause := ttllock.WaitEnd(ctx)
	if last != nil {
		cause = errors.Join(cause, last)
	}
	if timedOut {
		return &Error{Op: op, Table: table, Name: name, Err: ErrTimeout, Cause: cause}
	}
	return &Error{Op: op, Table: table, Name: name, Cause: cause}
}
