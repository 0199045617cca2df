// Package lease provides TTL leases in a PostgreSQL table: a lock that
// works through PgBouncer in transaction mode, that tells its holder when
// it can no longer be trusted, and whose fencing token the database itself
// checks. Before PgBouncer 1.21, put default_query_exec_mode=exec in the
// DSN: in pgx's default mode the statements fail, with an error matching
// [sqlock.ErrUnsupported] that names this cure.
//
// A [Manager] ([New], over a *sql.DB or a *pgxpool.Pool) takes leases by
// name in one table (created by [Migrate], or by the statements of [DDL]
// in a migration tool). [Manager.Acquire] waits, bounded by [WithTimeout];
// [Manager.TryAcquire] returns [ErrNotAcquired] at once. Acquiring,
// renewing and releasing are each one statement and one round trip, and
// every expiry is decided by the server's clock. Each acquisition has a
// random 128-bit owner id that renewal and [Lease.Release] check in the
// statement, so nobody extends or ends a lease they do not hold.
//
// A held [Lease] is renewed every TTL/3, transient failures retried while
// time remains. [Lease.Lost] and [Lease.Context] end when it can no longer
// be trusted: at the latest a TTL less a tenth after the last confirmed
// renewal was sent, measured on the local monotonic clock — before the
// server would let anyone else in.
//
// [Lease.Token] is a fencing token, strictly increasing per name across
// holders, processes, restarts and deleted rows. [Lease.Guard] checks, in
// the caller's own transaction, that the lease is still the holder's and
// keeps it from being taken over until the transaction ends: the writes
// commit only while the lease is held, or the transaction fails with
// [ErrLost] (aborted on the server). [Lease.QueueGuard] does the same in a
// pgx batch, and [Lease.BeginGuarded] in the BEGIN of a database/sql
// transaction (on a *sql.DB from txlock.OpenDB), each with no round trip
// of its own. This is what stops a holder that was paused past its TTL.
//
// A Lease is a [sqlock.Fenced] lock; [Manager.Acquirer] takes leases of one
// TTL through [sqlock.Acquirer], for code that also runs on advisory locks.
//
// [Manager.Candidate] runs a leader election on a lease: the leader holds
// the lease on the election's name, its term is the lease's token (so the
// lock:"fence" columns refuse a deposed leader), and its identity is
// recorded in the leaders table ([MigrateElections]) while that lease is
// live. [Candidate.Campaign] waits as long as its context allows,
// [Candidate.Leader] reads who leads, [Candidate.Observe] reports each
// change, and [Candidate.Election] is the candidate as a
// [sqlock.Election] (docs/election.md).
//
// [Manager.Semaphore] is a semaphore of N slots per name (a
// [sqlock.SemaphoreAcquirer]), each slot a [Slot] with a lease's renewal,
// loss and token, in one row per name of a table of its own
// ([MigrateSemaphores]); another size while a slot is held is
// [ErrSemaphoreSize] (docs/semaphores.md).
//
// Waiters are served in the order they arrived, across processes: a
// waiter takes a ticket in the waiters' table in the statement of its
// first failed attempt, and a lease goes only to the caller with no live
// ticket ahead; a waiter whose context ends gives its ticket back before
// Acquire returns. [Manager.AcquireAll] takes several names all or none,
// in one statement, as a [MultiLease]. [WithHolder] and [WithPayload]
// store who holds a lease with it, for operators (inspect, sqlock leases).
//
// Waiters learn of a release through LISTEN/NOTIFY: the head of the queue
// listens for the release, each waiter behind it for its predecessor's
// leaving, so a release wakes one waiter. Before its first
// LISTEN a Manager checks that the connection keeps its server session;
// behind PgBouncer in transaction mode it does not (a LISTEN would land on
// a pooled server connection and never be heard), and the Manager's
// waiters poll instead, every 50 ms unless [WithPolling] says otherwise.
// [WithObserver] reports waits, holds,
// retried renewals and losses as advisory's does (with
// observe/otelobserve: wait and hold spans). docs/lease.md has the
// statements and the reasoning behind them.
package lease
