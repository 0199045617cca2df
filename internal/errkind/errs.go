// Package errkind builds errors that carry their package's own message and
// match one of the shared sentinels of package sqlock (or any other
// sentinel) through errors.Is, without the sentinel's text repeated in the
// message.
package errkind

import "fmt"

// Error is a message with the sentinel it stands for.
type Error struct {
	msg  string
	kind error
}

// New returns an error whose text is the formatted message and which
// matches kind through errors.Is.
func New(kind error, format string, args ...any) error {
	return &Error{msg: fmt.Sprintf(format, args...), kind: kind}
}

func (e *Error) Error() string { return e.msg }

// Is reports whether target is the sentinel this error stands for.
func (e *Error) Is(target error) bool { return target == e.kind }

// Unwrap returns the sentinel, so that what it matches in turn is matched
// too: txlock's timeout stands for advisory's, which stands for sqlock's.
func (e *Error) Unwrap() error { return e.kind }
