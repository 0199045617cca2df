// Package txlock runs a function inside a transaction that holds
// pg_advisory_xact_lock on one or more keys from before its first statement
// until COMMIT or ROLLBACK, so the lock can never leak, and retries the whole
// transaction on the errors that deserve it.
//
//	err := txlock.Do(ctx, db, advisory.KeyOf("booking:seat-42"), func(ctx context.Context, tx *sql.Tx) error {
//		// only one transaction at a time gets here for this key
//		return book(ctx, tx, 42)
//	}, txlock.WithTimeout(2*time.Second))
//
// # Handles
//
// Do and DoKeys run on database/sql (*sql.DB, *sql.Conn, and types that
// embed them, such as sqlx's *sqlx.DB); DoPgx and DoPgxKeys on pgx
// (*pgxpool.Pool, *pgxpool.Conn, *pgx.Conn). Run is the engine under both,
// generic in the transaction type handed to fn, for libraries that wrap a
// transaction of their own (sqlxhelpers, gormplugin): they supply how to
// begin, with SQLTx (or a three-method Tx) to drive COMMIT and ROLLBACK, and
// get the same semantics, retries and error classification.
//
// # Keys
//
// Keys are advisory.Key values: 64-bit hashes of strings by default
// (advisory.KeyOf), the 32-bit hashtext form for compatibility with SQL that
// calls pg_advisory_xact_lock(hashtext(…)) (advisory.KeyText), integers or
// int4 pairs. They reach the server as integer literals formatted by this
// package, never as caller text. Several keys are locked one statement each
// in one canonical order (advisory.Key.Compare), duplicates once, so
// transactions asking for overlapping sets in any order never deadlock on
// each other's advisory locks.
//
// # fn must be safe to run again
//
// By default the whole transaction — BEGIN, the locks, fn, COMMIT — runs
// again (up to DefaultMaxAttempts attempts in all, with full-jitter backoff
// waited out after ROLLBACK, never while holding the locks) on what
// retry.Default retries: PostgreSQL reports a serialization failure (40001,
// including at COMMIT) or a deadlock (40P01), or fn returns a stale
// versioned write (an error matching versioned.ErrStale: a
// *versioned.StaleError, or the sentinel wrapped with %w). So fn may run
// more than once: it must re-read everything it depends on inside the
// transaction, have no effects outside the database (no e-mails, no HTTP
// calls, no channel sends) or make them idempotent, keep no state across
// runs, and wrap errors with %w so the SQLSTATE or the stale error stays
// visible. WithoutRetry makes one attempt only. When the retries run out,
// the *retry.ExhaustedError is permanent, so a retry.Do around the call does
// not run them all again.
//
// # Outcomes
//
//   - fn returns nil: COMMIT. If the caller's context ended meanwhile, ROLLBACK
//     instead and the context's error.
//   - fn returns an error: ROLLBACK, and that error is returned as it is (the
//     same value, unless it was retried and retries ran out: then a
//     *retry.ExhaustedError wrapping it).
//   - fn or an observer panics (or calls runtime.Goexit): ROLLBACK, which
//     releases the locks and the connection, and the panic goes on.
//   - COMMIT fails with a server error (a deferred constraint, a serialization
//     failure): that error, never nil; 40001 is retried.
//   - COMMIT's outcome is unknown (the connection broke, the context ended or
//     the server ended the session while COMMIT was in flight): an
//     *AmbiguousCommitError (errors.Is ErrAmbiguousCommit). It may have
//     committed: it is never retried (Permanent reports true); check before
//     doing the work again.
//   - The wait for a lock runs out: a *LockError that errors.Is ErrTimeout and
//     wraps the server's 55P03, fn not run. Retried only when asked
//     (WithRetry(retry.RetryLockTimeout())), and never when the context's
//     deadline set the bound (then it also matches context.DeadlineExceeded;
//     see Deadlines).
//   - TryOnce and a key is held elsewhere: a *LockError that errors.Is
//     ErrNotAcquired, fn not run, never waited.
//   - Bad input (nil handle, nil fn, no keys, an invalid key, an unknown pgx
//     transaction mode): ErrNilDB, ErrNilFunc, ErrNoKeys,
//     advisory.ErrInvalidKey, ErrTxOptions; nothing is sent.
//   - From inside fn (or advisory.Do's function), with its context and the
//     same database handle, a transaction (Do, DoPgx and their Keys forms)
//     on a key the enclosing one holds, in a conflicting mode (either
//     exclusive): an error matching ErrAlreadyHeld (and
//     advisory.ErrAlreadyHeld), nothing sent. It would run on another connection and wait for the enclosing
//     transaction's lock, which waits for fn: a deadlock the server cannot
//     see. Shared inside shared is allowed, and so is any key on another
//     handle (it may be another database, whose advisory locks are its
//     own); two handles on one database are not recognised as such.
//
// ROLLBACK after a failure runs on a context detached from the caller's
// cancellation (bounded to a few seconds), so a connection is rolled back
// and kept rather than closed. A lock wait that times out or a try-once that
// finds the key held is rolled back on the spot, so a pgx pool keeps the
// connection (it destroys one returned in the failed-transaction state). A
// context that ends while the server is working on a statement makes the
// driver close the connection; the server then ends the transaction, and its
// locks, as soon as it sees the connection go.
//
// # Timeouts
//
// WithTimeout (default DefaultTimeout, 5 s) sets lock_timeout for the
// transaction (SET LOCAL, or set_config(…, true) in the batch form) with the
// lock statements. It is transaction-scoped, so it never outlives the
// transaction or leaks into the pooled connection, and it bounds every lock
// wait in the transaction, fn's too: while fn waits it holds the advisory
// lock and everyone queued on the key waits with it. Waiting happens inside
// PostgreSQL, which detects deadlocks; a cancelled context ends the wait
// too.
//
// # Deadlines
//
// When ctx has a deadline, the wait ends on the server before it:
// lock_timeout is the shorter of WithTimeout and the time to the deadline
// less a reserve for the rest of the transaction (1.5 times the hold time
// plus two round trips, measured on each pgx connection from its COMMITs; a cold
// estimate elsewhere). The server answers 55P03 and the connection is kept,
// where a statement cut by the context would cost it. Neither the lock
// statement nor COMMIT is cut by the deadline (a cancellation still cuts
// them; a server that does not answer, a second after it); fn's statements
// run under ctx as usual. If no time is left to wait, the *LockError comes
// at once and nothing is sent. See docs/guide.md, "Request deadlines".
//
// A timeout means one thing across sqlock: a positive bound. Zero and
// negative durations are refused — the call returns an error matching
// ErrInvalidOption (and sqlock.ErrInvalidOption) and sends nothing —
// never read as "wait forever" or "the default". Not to wait at all, use
// TryOnce.
//
// # Round trips
//
// The cost of the lock is round trips, so it travels with BEGIN where it can:
//
//	handle                                          unlocked tx   locked tx (Do/DoPgx)
//	pgx: *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn    3             3 (BEGIN carries the locks)
//	database/sql opened with OpenDB/WrapConnector   3             3 (BEGIN carries the locks)
//	any other *sql.DB (pgx stdlib, lib/pq, …)       3             4 (locks right after BEGIN)
//	another PgxDB, or a caller-set BeginQuery       3             4
//
// (for BEGIN, one UPDATE and COMMIT; counted on the wire by TestRoundTrips).
//
// With pgx (and OpenDB, which reaches the *pgx.Conn under database/sql),
// BEGIN and one lock statement per key go as one batch (pgx.Batch.BeginTx:
// one pipeline, one Sync), and fn gets pgx's own transaction:
//
//	SELECT pg_catalog.pg_advisory_xact_lock($2::int8) FROM (SELECT pg_catalog.set_config('lock_timeout', $1::text, true)) s
//	SELECT pg_catalog.pg_advisory_xact_lock($1::int8)          -- each further key, or no timeout
//
// The statements take bind arguments and run in the connection's exec mode.
// In pgx's default mode (QueryExecModeCacheStatement) they are prepared once
// per connection, so the server does not parse and plan them for every
// transaction; that is most of what an uncontended lock costs (see
// BenchmarkUncontended). TryOnce reads pg_try_advisory_xact_lock's answers
// from the batch and rolls back if one is false.
//
// Attempt.PgxTxOptions, for a BeginFunc of one's own, is the text form: a
// BeginQuery of one simple-protocol message,
//
//	BEGIN [ISOLATION LEVEL …];SET LOCAL lock_timeout = '…ms';SELECT pg_catalog.pg_advisory_xact_lock(<key>)[;…]
//
// in which try-once turns false into an error (a cast of a marker text to
// int) that txlock reads back as ErrNotAcquired. On a database/sql handle
// not opened by OpenDB, the locks follow BEGIN as one more round trip: on a
// *sql.DB of pgx's driver, one key as the bound statement above (prepared
// once per connection); otherwise, and for several keys or TryOnce, the
// text, by the simple query protocol, which pgx's stdlib and lib/pq use for
// argument-less statements (lib/pq would spend a round trip preparing a
// bound one).
//
// # Poolers
//
// Transaction-level locks work through PgBouncer in transaction mode: the
// server connection is the client's from BEGIN to COMMIT, and the lock ends
// with the transaction (tested with the Debian package). Session locks
// (package advisory) do not. PgBouncer before 1.21 has no named prepared
// statements in transaction mode: with pgx, use default_query_exec_mode=exec
// or simple_protocol, as for any query; txlock's batch then goes unprepared,
// in the same one round trip.
//
// # Observability
//
// WithObserver reports observe.LockAcquire (outcome Acquired, Busy, Timeout,
// Deadlock, Canceled or Failed, with the wait) and observe.LockRelease
// (Released, or Lost for an ambiguous COMMIT, with the hold time from the
// lock to the end of COMMIT or ROLLBACK), one event per key, Source
// "txlock", and retries (observe.Retry). The default observer does nothing.
package txlock
