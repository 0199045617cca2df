// Package redislock provides the Redis lock of the article sqlock
// implements — on one server, and as Redlock over N independent servers —
// behind the same interface as sqlock's PostgreSQL locks, on go-redis v9.
//
// A lock key may not hold a NUL byte: it is refused with [ErrInvalid] and
// nothing is sent (that byte marks the fencing counters' key space);
// encode binary keys, in hex or base64, before using them as lock names.
//
// A [Locker] ([New], over any [redis.UniversalClient]) takes a lock on one
// server with one script: SET key owner NX PX ttl, where owner is 128
// random bits, and INCR of the counter [FenceKey](key) in the same atomic
// step, so that [Lock.Token] is a fencing token greater than every earlier
// holder's. The counter's key holds a NUL byte, which lock keys may not
// ([ErrInvalid]), and shares the key's Redis Cluster hash slot; a counter
// an earlier version left at key+[FenceSuffix] is still read, so tokens
// stay above it. [Locker.Acquire] waits, with jittered retries, bounded by
// [WithTimeout]; [Locker.TryAcquire] returns [ErrNotAcquired] at once.
// Release and renewal are scripts that act only while the key holds the
// owner; acquire and release are one round trip each. Release waits for a
// renewal in flight to end before it sends the release, so no renewal
// lands after it.
//
// [WithReplicas] makes each grant and renewal wait, in the same round
// trip (WAIT), for replicas to acknowledge it, and refuses a grant they do
// not ([ErrNotReplicated]): a failover to one of them then grants no lock
// twice — fewer lost writes, not consensus. [WithHolder] and
// [WithPayload] store who holds a lock beside its key, which
// [Locker.Holder] reads. [Locker.AcquireAll] takes several keys all or
// none in one script, in sorted order, each with its own token
// ([MultiLock]).
//
// [Locker.Semaphore] is a semaphore of N slots per key (a
// [sqlock.SemaphoreAcquirer]): one hash at [SemaphoreKey], one script that
// checks the size ([ErrSemaphoreSize]), takes a free slot and mints its
// token ([Slot]) in one step (docs/semaphores.md).
//
// A [Redlock] ([NewRedlock], over an odd number ≥ 3 of clients) sets the
// key on every server in parallel and holds the lock when a majority
// granted it within its validity: the TTL less the time the attempt took
// and the drift allowance (1% of the TTL plus 2 ms). Otherwise it deletes
// what it got and retries after a random pause. A lock's commands to one
// server run in the order they were issued, so no renewal or late SET of
// the acquisition reaches a server after the release; but a command that
// timed out on the client and that a paused server runs later can still
// leave the key on that one server until its TTL. A [RedlockLock] has no
// fencing token, and is not a [sqlock.Fenced]: the servers share no
// counter, and a server that restarts without its data lets a second holder
// in while the first still believes it holds the lock.
//
// Either lock is renewed every TTL/3, transient failures retried while time
// remains. Lost and Context end when it can no longer be trusted: at the
// latest when the TTL less the drift allowance has passed since the last
// confirmed acquiring or renewing command was sent, on the local monotonic
// clock — before the key can expire on the server. [WithObserver] reports
// waits, holds, retried renewals and losses.
//
// What Redis guarantees, and what it does not: a lock is as safe as its
// assumptions. Redlock assumes clocks that drift by less than the
// allowance and no process or network pause longer than the validity. A
// single server's fencing token survives a crash only with
// appendfsync always, and never a failover to a replica that missed the
// increment. A holder paused past its TTL wakes up believing it holds the
// lock until Lost fires; only a check in the protected data stops its
// writes — which is why the safe pairing is a [Lock]'s token checked by a
// fenced write in PostgreSQL (versioned, sqlxhelpers, gormplugin; the
// token travels in [Lock.Context]). docs/redislock.md has the details.
package redislock
