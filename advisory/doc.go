// Package advisory provides PostgreSQL advisory-lock keys and session-level
// advisory locks that never leak: each held lock owns a connection taken out
// of the pool, which goes back only after a confirmed unlock and is
// destroyed on any doubt.
//
//	l := advisory.New(db) // *sql.DB; advisory.NewPool(pool) for pgx
//	err := l.Do(ctx, advisory.KeyOf("payment:order-123"), func(ctx context.Context) error {
//		// Only one holder, in any process, runs this at a time.
//		// ctx ends if the lock is lost.
//		return charge(ctx, order)
//	})
//
// # Keys
//
// A Key is a value in one of PostgreSQL's two advisory key spaces: bigint
// (KeyOf hashes a string with hashtextextended's algorithm, KeyText with
// hashtext's, KeyInt takes a number) or a pair of int4 (KeyPair). Keys reach
// the server as bind parameters or as integer literals this package formats;
// never as caller text. The zero Key and KeyOf("") are invalid
// (ErrInvalidKey): a lock on "" almost always means a missing value.
//
// # The contract
//
// Mutual exclusion: while an exclusive lock (Lock, TryLock, Do) is held —
// from the moment it is returned until Unlock, or until it is lost — no
// other session, whether another goroutine's lock, another process or
// another machine, holds the same key in either mode. Shared holders
// (RLock, TryRLock, DoShared) exclude only exclusive ones.
//
// One connection per lock: a lock is held on a connection pinned out of the
// pool (database/sql: DB.Conn; pgx: Pool.Acquire) for exactly as long as it
// is held. Unlock runs pg_advisory_unlock on it and returns it to the pool
// only if that returned true. Anything else — false, an error, a timeout, a
// panic, a context that ended mid-statement — closes the connection instead
// (database/sql: driver.ErrBadConn through Conn.Raw; pgx: Conn.Close before
// Release), which ends the server session and every lock in it. A
// connection never carries a lock back into the pool, where the next user
// would get it for free (session locks are re-entrant per session).
//
// Nothing leaks: a lock granted but not handed to the caller (the context
// ended as it was granted, an observer panicked) is released or its
// connection destroyed before the call returns. Unlock runs on a context
// detached from the caller's cancellation (context.WithoutCancel) with a
// deadline of its own (WithUnlockTimeout), so a cancelled request still
// unlocks. No goroutine outlives its lock: a keepalive check runs in a
// goroutine of its own, one at a time per lock, never together with Unlock,
// which stops the checks and waits for one in progress.
//
// Bounded, server-side waits: Lock and RLock wait inside PostgreSQL, in its
// fair queue and visible to its deadlock detector, for at most the wait
// timeout (WithWaitTimeout, default 5 s; an earlier context deadline wins).
// The bound is a lock_timeout set with SET LOCAL in the same simple-protocol
// batch as the lock call; PostgreSQL runs such a batch as one implicit
// transaction, so the setting ends with it and is never left on the
// session (a session lock taken inside a transaction stays held after it).
// statement_timeout is lifted in the same way so that only the wait bound
// governs. A timeout means one thing across sqlock: a positive bound.
// Zero and negative durations (WithWaitTimeout, WithUnlockTimeout,
// WithKeepalive) are refused — every method returns an error matching
// ErrInvalidOption and nothing is sent — never read as "wait forever" or
// "the default". Not to wait at all, use TryLock. Under a context deadline
// the wait ends on the server before it — lock_timeout is the time to the
// deadline less 1.5 times the hold time and two round trips the Locker measured
// (grant to unlock; unlocks, keepalives) — so the connection is kept, and
// the deadline does not cut the lock statement (a cancellation does); with
// no time left, ErrTimeout comes at once. Outcomes are typed: ErrTimeout (the wait ran out; also
// context.DeadlineExceeded when the context's deadline was the bound),
// ErrNotAcquired (a try-once found it held), ErrDeadlock (SQLSTATE 40P01),
// context.Canceled.
//
// Timeout and cancellation races: a lock can be granted just as its
// lock_timeout fires, so after any failed wait that left the connection
// usable, the connection is swept with pg_advisory_unlock_all before it
// goes back to the pool (it holds nothing else: one lock per connection).
// When the outcome is unknown — the context ended mid-statement, the network
// failed — the connection is destroyed. If the call returns a lock, it is
// held.
//
// How the bounds are kept: the caller's context goes to the driver as it
// is; the package's own bounds (the wait, the unlock, a keepalive check) are
// deadlines on the statement. With pgx (a pgx pool, or database/sql with
// pgx's stdlib driver) they are the connection's read deadline, so they hold
// even when the server stops answering without an error, as behind a
// network partition: the statement fails as a timeout, the connection is
// closed, and the server ends the session (and its lock) when it sees the
// close (TestSilentConnection). pgx watches a context that can end with a
// callback per statement; a read deadline costs less, and the wait bound
// for a pooled connection comes from one timer per Locker rather than a
// context.WithDeadline per call, which is most of why a lock-and-unlock
// cycle costs within 10% of the bare statements. With
// other database/sql drivers the bounds are context deadlines; lib/pq
// answers a cancelled context with a cancel request but keeps reading, so
// against a silent server it waits until TCP gives up.
//
// Loss is visible: a keepalive (WithKeepalive, default 2 s) checks each held
// lock's connection with one round trip. When the connection dies — the
// backend is terminated, the server restarts, the connection is reset —
// Lost is closed, Err and Unlock report ErrLost, and the context Do gave its
// function ends with a cause matching ErrLost, within 1¼ intervals (checks
// run every interval to 1¼; one timer per Locker schedules them all). (A
// connection that silently stops answering is declared lost once a check
// has waited max(interval, 1 s) for an answer.) The holder must then stop:
// another holder may already have the lock. An advisory lock is not a
// fencing token.
//
// # Re-locking a key
//
// Locks are not re-entrant, and taking a key this Locker already holds is
// defined as follows. Go has no goroutine identity, so re-entrant counting
// would let a second goroutine walk into a critical section another one is
// in. Instead a hold is carried by a context: inside Do's function (or with
// the context from Lock.Context), Lock, TryLock, RLock, TryRLock, Do and
// DoShared of the same key on the same Locker return ErrAlreadyHeld at once,
// without waiting on themselves. The same holds across lockers and packages
// for requests through the same pool (*sql.DB or *pgxpool.Pool) in a
// conflicting mode (either exclusive): another Locker on that pool, or a
// txlock transaction on it inside Do's function, and an advisory lock asked
// for inside a txlock transaction's function — session and transaction
// advisory locks share one lock space. Different pools may be different
// databases, whose locks are their own, so they are never compared. Without
// that context, a second request is
// simply another session asking for the lock: it waits like any other
// holder — so a goroutine that asks twice waits on itself until the wait
// timeout and gets ErrTimeout, never longer. Other goroutines asking for a
// key this Locker holds wait for it normally, each on its own connection.
//
// # Where session locks cannot work
//
// The first acquisition of a Locker (or Verify) probes the server once: it
// must be PostgreSQL (CockroachDB's advisory-lock functions are no-op stubs;
// other engines do not have them), its hashtext and hashtextextended must
// agree with package pghash, and a connection must keep one server session. A
// pooler in transaction or statement mode (PgBouncer's pool_mode =
// transaction) moves a client between server backends between
// transactions, so a session lock would stay behind on a backend other
// clients then use. The probe detects it — a session setting made on one
// connection is seen by another, or the backend changes between statements
// of one connection — and every call then returns ErrUnsupported. Behind
// such a pooler use transaction-level locks (package txlock); session locks
// need a direct connection or session pooling. The probe looks for the
// evidence transaction pooling leaves (it takes two connections of the pool
// for a moment, or one if the pool has only one, and closes them); a pooler
// that by chance kept this client on one backend all through the probe
// would pass it, so the keepalive also treats a backend change during a
// hold as a loss.
//
// # Connections
//
// Each held lock, and each waiting one, uses a connection of the pool: size
// the pool for them plus the other work. A pool no larger than the number
// of callers that may wait at once starves a holder whose work needs a
// connection of the same pool: it waits until waiters time out. With database/sql and pgx, taking a
// pooled connection that has been idle for more than a second costs one
// ping (the drivers' liveness check); otherwise an uncontended
// TryLock+Unlock is two round trips, and so is Lock+Unlock.
//
// Errors are *Error values carrying the operation, the key and the cause;
// match them with errors.Is against the Err* variables. A key made from
// text is named by its text in errors and logs, beside its number.
package advisory
