package retry

import (
	"context"
	"errors"

	"github.com/sqlock/sqlock/internal/mysqlerror"
	"github.com/sqlock/sqlock/internal/pgerror"
)

// SQLSTATE codes the default classification knows.
const (
	CodeSerializationFailure = pgerror.SerializationFailure // "40001"
	CodeDeadlockDetected     = pgerror.DeadlockDetected     // "40P01"
	CodeLockNotAvailable     = pgerror.LockNotAvailable     // "55P03"
)

// Classifier decides whether err is worth another attempt, and names the
// cause for metrics and logs ("stale", "40001", …).
type Classifier func(err error) (retry bool, cause string)

// Default is the default classification: errors with a RetryCause (a
// *versioned.StaleError, and versioned.ErrStale itself, wrapped or not), and
// SQLSTATEs 40001 and 40P01 — on MySQL and MariaDB a deadlock (error 1213,
// SQLSTATE 40001, cause "40001") and MariaDB's snapshot-isolation conflict
// (error 1020, cause "mysql:1020"), both of which roll the transaction back.
// (Context errors and permanent errors are excluded before any classifier
// runs.)
func Default(err error) (bool, string) {
	var rc interface{ RetryCause() string }
	if errors.As(err, &rc) {
		if cause := rc.RetryCause(); cause != "" {
			return true, cause
		}
	}
	switch code := SQLState(err); code {
	case CodeSerializationFailure, CodeDeadlockDetected:
		return true, code
	}
	switch n, _, _ := mysqlerror.Number(err); n {
	case mysqlerror.LockDeadlock:
		return true, CodeSerializationFailure
	case mysqlerror.CheckRead:
		return true, "mysql:1020"
	}
	return false, ""
}

// SQLState returns the SQLSTATE of the first error in err's chain that has
// a SQLState() string method (pgx's *pgconn.PgError, lib/pq's *pq.Error),
// else of a MySQL server error (go-sql-driver/mysql's *MySQLError, read by
// its shape: package retry imports no MySQL driver), or "" when there is
// none.
func SQLState(err error) string {
	if code := pgerror.Code(err); code != "" {
		return code
	}
	_, code, _ := mysqlerror.Number(err)
	return code
}

// permanentError marks an error as not retryable.
type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() error   { return e.err }
func (e *permanentError) Permanent() bool { return true }

// Stop marks err as not retryable, whatever its cause: a function inside Do
// returns Stop(err) to end the retries with err (errors.Is and errors.As
// still see err). Stop(nil) is nil.
func Stop(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err's chain has an error whose Permanent()
// method returns true: Stop's, an *ExhaustedError (retries already ran out
// inside), or another package's (an ambiguous COMMIT).
func IsPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
