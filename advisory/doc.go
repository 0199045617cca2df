// Package advisory provides PostgreSQL advisory-lock keys and session-level
// advisory locks that never leak: each held lock owns a connection taken out
// of the pool, which goes back only after a confirmed unlock and is
// destroyed on any doubt.
//
//	l := advisory.New(db) // *sql.DB; advisory.NewPool(pool) for pgx
//	err := l.Do(ctx, advisory.KeyOf("payment:order-123"), func(ctx context.Context) error {
//		return charge(ctx, order) // one holder at a time, in any process; ctx ends if the lock is lost
//	})
//
// Start with [New] (or [NewPool]) and [Locker.Do]; [Locker.Lock] and
// [Locker.TryLock] return a [Lock] to release with [Lock.Release] (a
// [sqlock.Lock]; [Locker.Acquirer] takes them by name for code that also
// runs on leases). A [Key] comes
// from [KeyOf] (64-bit, hashtextextended), [KeyText] (32-bit, as SQL calling
// hashtext), [KeyInt] or [KeyPair], and reaches the server as a bind
// parameter or an integer literal, never as caller text.
//
// What it promises:
//   - Mutual exclusion: while an exclusive lock is held no other session
//     holds its key; shared holders ([Locker.RLock], [Locker.DoShared])
//     exclude only exclusive ones.
//   - Nothing leaks: a connection never carries a lock back into the pool; a
//     lock granted but not handed over (a cancelled context, a panic) is
//     released, or its connection closed, before the call returns.
//   - Bounded waits inside PostgreSQL: at most [WithTimeout] or the
//     context's deadline, with typed outcomes ([ErrTimeout], [ErrNotAcquired],
//     [ErrDeadlock], context errors). A wait that ran out for a pooled
//     connection, not the lock, is [ErrConnTimeout] (matching ErrTimeout),
//     and says so: size the pool for the locks held at once.
//   - Loss is visible: a keepalive ([WithKeepalive]) closes [Lock.Lost] and
//     ends Do's context (cause [ErrLost]) within 1¼ intervals. Stop then:
//     an advisory lock is not a fencing token.
//   - No re-entry: asking again for a key held in ctx is [ErrAlreadyHeld],
//     never a wait on itself.
//   - Where session locks are not real (PgBouncer in transaction mode, no-op
//     engines) a one-time probe ([Locker.Verify]) refuses every call with
//     [sqlock.ErrUnsupported]. Behind PgBouncer, use
//     [github.com/sqlock/sqlock/lease] for a lock held across transactions
//     (it also fences a paused holder out), or
//     [github.com/sqlock/sqlock/txlock] for a lock that lasts one
//     transaction.
//
// Each held lock pins a connection. [WithMultiplexing] lets many share a
// few: a try-once rides a connection that holds other locks (never one
// holding its own key: PostgreSQL would grant it twice), a granted wait's
// connection joins them. The set grows with concurrency, not with the
// number of locks: try-onces made one after another all ride one
// connection. It is off by default because it trades pool
// exhaustion for blast radius: one dead connection loses every lock on it,
// and each lock's statements queue behind the others' on its connection.
// Turn it on when the locks held at once outnumber what the pool can spare.
// Behind PgBouncer in transaction mode it changes nothing: session locks are
// refused either way.
//
// [WithKeyNames] records each key's text once, so that
// [github.com/sqlock/sqlock/inspect] and the sqlock command show names.
//
// [Locker.Semaphore] is a documented refusal ([ErrNoSemaphores], matching
// [sqlock.ErrUnsupported]): an advisory lock has no fencing token and the
// server no size beside a key; use lease's semaphores (docs/semaphores.md).
//
// Options mean what they mean in every sqlock package (see [observe]).
// Errors are [*Error] values. The how — lock_timeout batches, sweeps after a
// timeout race, read deadlines, the probe, pool sizing — is docs/advisory.md.
package advisory
