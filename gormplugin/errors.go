package gormplugin

import (
	"errors"
	"fmt"

	"github.com/sqlock/sqlock"
)

// Errors of this package. Stale writes, overflows, missing keys and bad
// version tags are package versioned's errors (*versioned.StaleError,
// *versioned.OverflowError, *versioned.KeyError, *versioned.TagError), so
// errors.Is(err, versioned.ErrStale) and friends work the same for GORM,
// sqlx and database/sql users. A write the plugin cannot version safely is
// an *UnsupportedError, which matches [sqlock.ErrUnsupported].
var (
	// ErrNullVersion: with NullRefused, the row's version column is NULL.
	// Returned as *NullVersionError. It is not a stale write and package
	// retry does not retry it: the row must be repaired.
	ErrNullVersion = errors.New("gormplugin: NULL version")
)

// UnsupportedError reports a write the plugin refused because it cannot
// keep its guarantee for it: an update or delete of a non-empty slice of
// versioned rows, an upsert that updates every column of a versioned row,
// an Association(…).Delete on a versioned table, or a locked transaction on
// an engine without advisory locks. Nothing was sent. It matches
// [sqlock.ErrUnsupported].
type UnsupportedError struct {
	Table  string
	Op     string // "update", "delete", "create", "locked transaction"
	Reason string
}

func (e *UnsupportedError) Error() string {
	if e.Table == "" {
		return fmt.Sprintf("gormplugin: unsupported %s: %s", e.Op, e.Reason)
	}
	return fmt.Sprintf("gormplugin: unsupported versioned %s of %s: %s", e.Op, e.Table, e.Reason)
}

// Is makes errors.Is(err, sqlock.ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == sqlock.ErrUnsupported }

// NullVersionError reports a row whose version column is NULL under
// NullRefused.
type NullVersionError struct {
	Table  string
	Column string
	Key    any
}

func (e *NullVersionError) Error() string {
	return fmt.Sprintf("gormplugin: %s.%s is NULL for key %v: set the column NOT NULL DEFAULT 1 (UPDATE %s SET %s = 1 WHERE %s IS NULL)",
		e.Table, e.Column, e.Key, e.Table, e.Column, e.Column)
}

// Is makes errors.Is(err, ErrNullVersion) true.
func (e *NullVersionError) Is(target error) bool { return target == ErrNullVersion }
