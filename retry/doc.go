// Package retry runs an operation again when it fails in a way that is safe
// to retry, with backoff between attempts.
//
// By default an error is retried when:
//
//   - its chain has an error with a RetryCause() string method returning a
//     non-empty cause — *versioned.StaleError and the versioned.ErrStale
//     sentinel do ("stale"), so fmt.Errorf("update orders: %w",
//     versioned.ErrStale) is retried too: someone else updated the row
//     first, so the operation re-reads and tries again;
//   - its SQLSTATE is 40001 (serialization_failure) or 40P01
//     (deadlock_detected): PostgreSQL rolled the transaction back and says
//     it may succeed if run again;
//   - its SQLSTATE is 55P03 (lock_not_available: lock_timeout ran out), but
//     only with RetryLockTimeout, since waiting longer is a choice the caller
//     should make.
//
// It is never retried when the context is cancelled or past its deadline,
// when the chain has an error whose Permanent() method returns true (Stop
// marks one; a COMMIT whose outcome is unknown is such an error, and so is
// an *ExhaustedError from a retry that already ran out), or in any other
// case. SQLSTATEs are read from any error in the chain with a
// SQLState() string method: pgx's *pgconn.PgError and lib/pq's *pq.Error
// both have one, wrapped or not. Add predicates with RetryIf or replace the
// whole classification with WithClassifier.
//
// A retried function must be safe to run again: it re-reads what it depends
// on, and when it runs a transaction, the whole transaction is inside it.
// Retrying one statement of a transaction PostgreSQL has aborted is wrong.
//
// The default backoff is exponential with full jitter (a uniform random
// delay between 0 and min(cap, base·2^(attempt-1))), 10 attempts, no total
// time limit (WithMaxElapsed counts from the start of the first attempt). A
// failed operation returns the last error unchanged when it is not
// retryable, so errors.Is and errors.As see it exactly as fn returned it;
// when retries run out, it returns an *ExhaustedError that wraps the last
// error (errors.Is(err, ErrExhausted) and errors.Is(err, versioned.ErrStale)
// both hold).
//
// Retries do not multiply when nested. An *ExhaustedError is permanent, so
// a Do around a call that retries by itself — txlock.Do, gormplugin's and
// sqlxhelpers' locked transactions — returns the inner retry's
// *ExhaustedError at once rather than running the inner budget again; an
// error the inner call did not retry is classified as usual.
//
// The first attempt costs one function call (and a clock read when options
// are given, for the time limit): options are read only after a failure, so
// Do on a first-attempt success allocates nothing.
package retry
