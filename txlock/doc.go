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
// [DoOptimistic] is optimistic locking that queues when the key turns hot:
// fn's first attempt runs lock-free, the attempts after a conflict hold the
// key's lock, and with [WithHotKeys] new calls queue at once while one
// waits, or when a crowd arrives on a cold key.
//
// Start with [Do] (database/sql) or [DoPgx] (pgx); open the *sql.DB with
// [OpenDB] (or [WrapConnector]) and BEGIN carries the lock, so a locked
// transaction costs the round trips of an unlocked one, as with pgx.
// gormplugin.Transaction and sqlxhelpers.Do are the same transaction for GORM
// and sqlx, with the same [Option]s.
//
// What it promises:
//   - Keys ([AlsoLock] adds more) are locked in one canonical order, so
//     overlapping sets never deadlock on each other; they reach the server as
//     integers, never as caller text.
//   - fn runs again as a whole on serialization failures, deadlocks and stale
//     versioned writes (up to 5 attempts; [WithRetry], [WithoutRetry]), so it
//     must re-read what it depends on and have no effects outside the database.
//   - The wait is bounded ([WithTimeout], default 5 s; a context deadline ends
//     it on the server, before the deadline): [ErrTimeout]. [TryOnce] never
//     waits: [ErrNotAcquired]. fn does not run in either case, and the
//     connection is kept.
//   - A COMMIT whose outcome is unknown is [ErrAmbiguousCommit], never retried.
//   - A nested transaction on a key its caller holds is refused at once:
//     [ErrAlreadyHeld].
//   - Bad input is refused before anything is sent, with an error matching
//     sqlock.ErrNilHandle, sqlock.ErrInvalidOption or advisory.ErrInvalidKey.
//   - Works through PgBouncer in transaction mode, with
//     default_query_exec_mode=exec in the DSN before PgBouncer 1.21 (else
//     its 42P05/26000 failures match sqlock.ErrUnsupported and name that
//     cure); [WithObserver] reports lock and retry events.
//
// The whole contract — outcomes, deadlines, the statements on the wire and
// the round trips per handle — is in docs/txlock.md in the repository.
package txlock
