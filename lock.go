package sqlock

import (
	"context"
	"errors"
)

// Lock is a held lock, whichever backend took it: an advisory session lock
// (*advisory.Lock), a lease (*lease.Lease) or a Redis lock
// (*redislock.Lock, *redislock.RedlockLock). Code written against Lock
// runs unchanged when the backend changes.
type Lock interface {
	// Release gives the lock up. It runs even if ctx is already
	// cancelled (with a bound of its own), and reports whether the
	// backend confirmed it: an error matching ErrLost or the backend's
	// not-held error means someone else may have held it meanwhile.
	Release(ctx context.Context) error
	// Lost is closed when the lock can no longer be trusted. Stop the
	// work it protects then. A Release does not close it.
	Lost() <-chan struct{}
	// Context returns a context derived from parent that ends when the
	// lock is lost (its cause then matches ErrLost) or cancel is called.
	Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc)
	// Err is nil while the lock is trusted, then an error matching
	// ErrLost that says why.
	Err() error
}

// Fenced is a Lock that carries a fencing token: a number greater than
// that of every earlier holder of the same lock, which the protected data
// can check so that a holder that lost the lock without noticing (a
// process paused past its lease) cannot write after the next holder did.
// *lease.Lease and *redislock.Lock are Fenced; an advisory lock and a
// Redlock lock are not — ask with a type assertion:
//
//	if f, ok := lk.(sqlock.Fenced); ok {
//		tok := f.Token() // write it beside the data; refuse smaller ones
//	}
//
// A Fenced lock's Context also carries the token ([WithFencingToken]), so
// the fenced writes of versioned, sqlxhelpers and gormplugin made with that
// context check it without another line.
type Fenced interface {
	Lock
	Token() int64
}

// Acquirer takes locks by name. advisory's (*Locker).Acquirer, lease's
// (*Manager).Acquirer and redislock's (*Locker).Acquirer and
// (*Redlock).Acquirer adapt each backend to it, so that switching backend
// is changing one constructor:
//
//	var locks sqlock.Acquirer = advisory.New(db).Acquirer()
//	var locks sqlock.Acquirer = lease.New(db).Acquirer(10 * time.Second)
//	var locks sqlock.Acquirer = redislock.New(client).Acquirer(10 * time.Second)
//
// A name the backend cannot take (the empty name on every backend) is an
// error matching [ErrInvalidArgument], with nothing sent.
type Acquirer interface {
	// Acquire waits for the lock called name, as long as the backend's
	// wait bound and ctx allow; a wait that runs out is an error matching
	// ErrTimeout.
	Acquire(ctx context.Context, name string) (Lock, error)
	// TryAcquire takes the lock if it is free and otherwise returns an
	// error matching ErrNotAcquired at once.
	TryAcquire(ctx context.Context, name string) (Lock, error)
}

// The outcomes every lock backend reports the same way. Each backend's own
// sentinel (advisory.ErrTimeout, lease.ErrTimeout, redislock.ErrTimeout,
// txlock.ErrTimeout, …)
// matches the shared one through [errors.Is], so code written against
// [Acquirer] and [Lock] need not know the backend.
var (
	// ErrNotAcquired: a try-once acquisition found the lock held by
	// someone else.
	ErrNotAcquired = errors.New("sqlock: lock held by someone else")
	// ErrTimeout: a wait for a lock ran out.
	ErrTimeout = errors.New("sqlock: timed out waiting for the lock")
	// ErrLost: a held lock can no longer be trusted (its session ended,
	// its lease expired or was taken over).
	ErrLost = errors.New("sqlock: lock lost")
)
