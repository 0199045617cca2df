package dynamo

import (
	"errors"

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
	ErrNotAcquired = sentinels.NotAcquired
	// ErrTimeout: Acquire waited for its whole bound (WithTimeout, or the
	// context's deadline, which then — and only then — also matches
	// context.DeadlineExceeded) without getting the lock.
	ErrTimeout = sentinels.Timeout
	// ErrLost: the lock can no longer be trusted — no renewal was
	// confirmed before its local deadline, or the table no longer has it
	// as this holder's.
	ErrLost = sentinels.Lost
	// ErrNotHeld: Release of a lock that was already released, or that the
	// table no longer had as this holder's; nothing changed.
	ErrNotHeld = sentinels.NotHeld
	// ErrInvalid: an argument the call cannot honour (an empty or
	// oversized lock name, a TTL shorter than MinTTL, an empty attribute
	// name, an assignment to a key attribute, a key of the wrong shape …).
	// Nothing was sent. It matches sqlock.ErrInvalidArgument.
	ErrInvalid = errkind.New(sqlock.ErrInvalidArgument, "dynamo: invalid argument")
	// ErrMissing: a fenced write found no item with the key; nothing was
	// written (a fenced write never creates an item).
	ErrMissing = errors.New("dynamo: no item has the key")
)

// sentinels are the errors every TTL lock backend reports, in this
// package's words; ErrInvalid is this package's own, since it refuses more
// than a lock's name or TTL (attributes, keys).
var sentinels = ttllock.NewSentinels("dynamo", "lock", "name")

// kit describes the package to the TTL-lock toolkit: its sentinels, and
// its options' shared part.
var kit = &ttllock.Package{
	Name: "dynamo", System: "aws.dynamodb", Noun: "lock",
	Sentinels: func() ttllock.Sentinels {
		s := sentinels
		s.Invalid = ErrInvalid
		return s
	}(),
	Error: func(op, name string, kind, cause error) error {
		return &Error{Op: op, Name: name, Err: kind, Cause: cause}
	},
	Margin: margin, MarginName: "clock-rate allowance",
	RetryMin: retryMin, RetryMax: retryMax,
	DefaultTimeout: DefaultTimeout,
}

// Error is the error type of this package.
type Error struct {
	Op    string // "acquire", "tryacquire", "hold", "release", "compare-and-swap", "update", "put", "create-table" …
	Table string // the table
	Name  string // the lock's name, "" when not applicable
	Err   error  // one of the sentinels above, or nil
	Cause error  // the underlying error (the SDK's, the context's, a detail), or nil
}

func (e *Error) Error() string {
	op := e.Op
	if e.Table != "" {
		op += " on " + e.Table
	}
	return ttllock.ErrorText("dynamo", op, e.Name, e.Err, e.Cause)
}

// Unwrap returns the sentinel and the cause, so errors.Is and errors.As see
// both.
func (e *Error) Unwrap() []error { return ttllock.Unwrap(e.Err, e.Cause) }

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
