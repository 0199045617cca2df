// Package txlock runs a function inside a transaction that holds
// pg_advisory_xact_lock on one or more keys from before its first statement
// until COMMIT or ROLLBACK, so the lock can never leak, and retries the whole
// transaction on the errors that deserve it.
package txlock
