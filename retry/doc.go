// Package retry runs an operation again when it fails in a way that is safe
// to retry, with backoff between attempts.
//
//	err := retry.Do(ctx, func(ctx context.Context) error {
//		return payOrder(ctx, id) // re-reads what it depends on; one whole transaction
//	})
//
// Start with [Do] (or [DoValue]); [Wrap] and [WrapErr] turn a repository
// method into a retrying one; [New] builds a reusable [Policy].
//
// What is retried ([Default]): an error whose chain has a RetryCause() —
// *versioned.StaleError and versioned.ErrStale, wrapped or not — and
// SQLSTATEs 40001 (serialization_failure) and 40P01 (deadlock_detected),
// read with [SQLState] from any driver's error in the chain; on MySQL and
// MariaDB a deadlock (error 1213) and MariaDB's snapshot-isolation conflict
// (error 1020), read from go-sql-driver/mysql's error without importing it.
// 55P03 (lock_timeout) and MySQL's lock wait timeout (1205) only with
// [RetryLockTimeout]; more with [RetryIf], or another classification with
// [WithClassifier].
//
// What it promises:
//   - Never retried: an ended context, or an error marked permanent ([Stop],
//     an ambiguous COMMIT, an [*ExhaustedError] — so nested retries never
//     multiply: an outer Do returns the inner one's exhaustion at once).
//   - A failure that is not retried is returned unchanged; when retries run
//     out, an [*ExhaustedError] ([ErrExhausted]) wraps the last error.
//   - Backoff is [Exponential] with full jitter (default 1 ms to 100 ms, 10
//     attempts, no time limit unless [WithMaxElapsed], counted from the
//     first attempt).
//   - A first attempt that succeeds allocates nothing.
//
// A retried function must be safe to run again: it re-reads what it depends
// on, and when it runs a transaction the whole transaction is inside it —
// never one statement of a transaction PostgreSQL has aborted.
//
// Options mean what they mean in every sqlock package (see [observe]): an
// invalid one is refused with [sqlock.ErrInvalidOption] before fn runs.
package retry
