// Package sqlock holds the words every sqlock package shares, so that one
// condition has one name whichever package reports it.
//
// The mechanisms live in packages of their own: [github.com/sqlock/sqlock/advisory]
// (PostgreSQL advisory locks), [github.com/sqlock/sqlock/lease] (TTL leases
// with fencing tokens), [github.com/sqlock/sqlock/redislock] (Redis locks:
// one server with fencing tokens, or Redlock), [github.com/sqlock/sqlock/txlock]
// (a transaction holding advisory locks), [github.com/sqlock/sqlock/idem]
// (idempotency keys), [github.com/sqlock/sqlock/versioned] (optimistic
// version columns), [github.com/sqlock/sqlock/retry], and the adapters
// [github.com/sqlock/sqlock/gormplugin] and [github.com/sqlock/sqlock/sqlxhelpers].
//
// Every package refuses bad input before it sends anything, with an error that
// matches one of the sentinels below through [errors.Is] and says in its text
// which package and which argument; a package's own sentinel for it
// (advisory.ErrInvalidKey, lease.ErrInvalid, redislock.ErrInvalid,
// idem.ErrInvalidKey) matches too:
//
//	if errors.Is(err, sqlock.ErrInvalidOption) { … }   // a zero WithTimeout, in any package
//	if errors.Is(err, sqlock.ErrInvalidArgument) { … } // TryAcquire(ctx, ""), on any backend
//
// A held lock of any backend is a [Lock] (Release, Lost, Context, Err); one
// that mints fencing tokens is also a [Fenced]. An [Acquirer] takes locks by
// name, so that code written against these runs on another backend by
// changing one constructor — advisory's (*Locker).Acquirer, lease's
// (*Manager).Acquirer, redislock's (*Locker).Acquirer or (*Redlock).Acquirer —
// and every backend's outcomes match [ErrNotAcquired], [ErrTimeout] and
// [ErrLost].
//
// The same holds for the other shapes of coordination: a [SemaphoreAcquirer]
// lets at most N holders of a name in at once, each holding a [Slot]
// (lease, redislock, etcdlock), and an [Election] elects one leader among
// replicas: the winner holds a [Leadership], a fenced lock whose token is
// its term (lease, etcdlock).
// [github.com/sqlock/sqlock/etcdlock] and [github.com/sqlock/sqlock/dynamo]
// (DynamoDB's conditional writes) are modules of their own;
// [github.com/sqlock/sqlock/httpver] carries versions over HTTP (ETag,
// If-Match, 412) and [github.com/sqlock/sqlock/inspect] shows who holds what.
//
// A fencing token travels to the writes it protects in the context
// ([WithFencingToken], [FencingToken]; a lease's Context puts it there):
// versioned, sqlxhelpers and gormplugin refuse a write to a row whose
// lock:"fence" column already holds a larger token.
package sqlock
