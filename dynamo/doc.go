// Package dynamo provides the article's DynamoDB conditional writes —
// compare-and-swap, versioned items, and a lock with fencing tokens that
// needs no shared clock — on the AWS SDK for Go v2. It is a module of its
// own, so that users of sqlock's SQL packages never download the SDK.
//
// A [Table] ([NewTable]) writes items with conditions. Every attribute name
// and value reaches DynamoDB as a placeholder, never spliced into an
// expression. [Table.CompareAndSwap] is the article's claimTask, one
// conditional UpdateItem whose losing is (false, nil). [Table.Update] and
// [Table.Delete] check and bump a version attribute, and [Table.Put] does
// the same for a struct with a lock:"version" field marshalled by
// attributevalue: a write at a stale version is a *versioned.StaleError
// (versioned.ErrStale, so package retry retries it) that tells a missing
// item from a changed one. [Table.UpdateFenced] writes only while the
// item's fence is at most the fencing token its context carries, checked by
// DynamoDB inside the write.
//
// A [Locker] ([NewLocker], on a table made by [CreateLockTable] or from
// [LockTableDefinition]) takes a [Lock] ([Locker.Acquire],
// [Locker.TryAcquire], [Locker.Acquirer]): a [sqlock.Lock] and
// [sqlock.Fenced]. DynamoDB has no clock a condition can read, so nothing
// compares the clocks of two machines: the lock item carries a record
// version that its holder rewrites every TTL/3, and a waiter takes over
// only once it has itself watched the same record version stay unchanged
// for the holder's whole TTL (Amazon's DynamoDB Lock Client's rule). The
// holder trusts its lock until TTL less 1% + 2 ms after the request that
// granted or last renewed it was sent, on its own monotonic clock, so
// [Lock.Lost] fires before any waiter can take over — as long as the two
// clocks' rates differ by less than that. The write that grants the lock
// also adds one to the item's fencing counter: [Lock.Token].
//
// Errors match the sentinels of package sqlock: [ErrNotAcquired],
// [ErrTimeout], [ErrLost], [ErrInvalid] (sqlock.ErrInvalidArgument).
// Throttling is retried by the client's own retryer. docs/dynamo.md
// says what was tested against what: dynalite, not DynamoDB.
package dynamo
