// Package etcdlock is sqlock's lock backend on an etcd cluster: a lock
// whose lease the cluster expires by its own Raft-replicated clock, and
// whose fencing token is a cluster-wide revision, for when one PostgreSQL
// primary or Redlock is not enough.
//
// [New] makes a [Locker] on a go.etcd.io/etcd/client/v3 client.
// [Locker.Acquire] waits in line for a name (bounded by [WithTimeout] and
// the context), [Locker.TryAcquire] takes it only if it is free
// ([ErrNotAcquired] at once), and [Locker.Acquirer] adapts the Locker to
// [sqlock.Acquirer]. A [*Lock] is a [sqlock.Fenced]:
//
//   - each lock has a lease of its own, granted for its TTL (whole seconds)
//     and kept alive every TTL/3 ([WithSharedLease]: the Locker's locks of
//     one TTL share one, as a concurrency.Session's mutexes do, for one
//     round trip fewer per acquisition); [Lock.Lost] fires when the lease
//     can no longer be trusted — the cluster refused a keepalive, or none
//     was confirmed before [Lock.Deadline], which on the local monotonic
//     clock comes before the cluster can expire the lease ([WithMaxHold]
//     also caps the hold);
//   - the lock is a key under the name, attached to the lease; waiters
//     queue by their keys' create revisions, each watching only its
//     predecessor, and one whose context ends leaves the line at once;
//   - [Lock.Token] is the key's create revision: greater for every later
//     holder, across leader changes, member failures and restarts of the
//     cluster with its data. [Lock.Context] carries it
//     ([sqlock.WithFencingToken]), so the lock:"fence" columns of versioned,
//     sqlxhelpers and gormplugin refuse a paused holder's late write;
//   - [Lock.Release] revokes the lease, which deletes the key with it.
//
// [Locker.Candidate] runs a leader election on the lock of the election's
// name, as etcd's concurrency.Election does: candidates queue by create
// revision, the holder writes its identity into its key, the term is the
// key's create revision (a fencing token), [Candidate.Leader] reads the
// oldest key and [Candidate.Observe] watches them; [Candidate.Election] is
// the candidate as a [sqlock.Election] (docs/election.md).
//
// [Locker.Semaphore] is a semaphore of N slots per name (a
// [sqlock.SemaphoreAcquirer]): slot keys under the name, each on a lease of
// its own and written by one transaction that also checks that no key of
// the name has another size ([ErrSemaphoreSize]); the create revision is
// the slot's token (docs/semaphores.md).
//
// Errors match sqlock's sentinels: [ErrNotAcquired], [ErrTimeout], [ErrLost]
// and [ErrInvalid] (sqlock.ErrInvalidArgument: an empty or oversized name,
// a TTL outside [MinTTL, MaxTTL]; nothing is sent). What etcd guarantees,
// and where that ends (a paused holder is stopped only by fencing), is in
// docs/etcdlock.md.
//
// The package is a module of its own, so that users of the rest of sqlock
// do not get gRPC in their module graph.
package etcdlock
