// Package lockedtx is the engine of package txlock: a transaction that
// takes pg_advisory_xact_lock on its keys before the caller's function
// runs, commits or rolls back, and is retried as a whole on the errors that
// deserve it. txlock.Do, txlock.DoPgx, gormplugin.Transaction and
// sqlxhelpers.Do are adapters on Run: each says how to begin its
// transaction type (a BeginFunc) and gets the same semantics, documented on
// package txlock and in docs/txlock.md. txlock.Option is a func(*Config).
//
// One key's path to the wire, file by file:
//
//	run.go     Run validates the options and builds the plan (plan.go: keys in
//	           canonical order, the lock statements), then runs the attempts:
//	           lock (BEGIN and the locks), fn, COMMIT or ROLLBACK.
//	begin.go   the BeginFunc of a database/sql or pgx handle.
//	fold.go    BEGIN with the locks in one round trip, where the connection
//	           allows; the begin step reports whether it folded, and only if
//	           not does run.go send the lock statements after BEGIN. The
//	           batching under it (prepared batches, the database/sql
//	           connection that sends a request's statements with BEGIN) is
//	           internal/txbatch's, which lease and idem use alone.
//	attempt.go one attempt's state: its wait bound (from the caller's
//	           deadline and the connection's estimates) and the statements
//	           carrying it.
//	errors.go  the errors txlock exports (COMMIT errors are read by
//	           internal/pgerror).
//	hot.go     for txlock.DoOptimistic (Config.Unlocked): the counts of each
//	           key's running attempts, locked and lock-free, that decide
//	           whether a new call's first attempt runs unlocked.
package lockedtx
