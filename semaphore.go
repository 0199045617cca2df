package sqlock

import (
	"context"
	"errors"
)

// SemaphoreAcquirer takes slots of semaphores by name: at most Size
// holders of a name at once, in every process that shares the backend.
// lease's (*Manager).Semaphore, redislock's (*Locker).Semaphore and
// etcdlock's (*Locker).Semaphore make one for a size and a TTL:
//
//	var slots sqlock.SemaphoreAcquirer = lease.New(db).Semaphore(3, 10*time.Second)
//	var slots sqlock.SemaphoreAcquirer = redislock.New(client).Semaphore(3, 10*time.Second)
//	var slots sqlock.SemaphoreAcquirer = etcdlock.New(client).Semaphore(3, 10*time.Second)
//
// Each holder has a slot of its own: a [Slot], renewed, owner-checked and
// lost on its own as any lock of the backend is; a holder that crashes
// frees its slot when its TTL runs out.
//
// The size is the name's while any slot of it is held: a caller that asks
// for another size gets an error matching [ErrSemaphoreSize], never a slot
// beside holders who count to another number. Once every slot is free the
// next holder may choose a size anew.
//
// Its methods return a Slot, not a [Lock], so that a SemaphoreAcquirer is
// never taken for an [Acquirer]: code that needs one holder would get N.
// A bad name, a size below 1 or a TTL the backend refuses is an error
// matching [ErrInvalidArgument], with nothing sent.
type SemaphoreAcquirer interface {
	// Acquire waits for a free slot of the semaphore called name, as long
	// as the backend's wait bound and ctx allow; a wait that runs out is an
	// error matching ErrTimeout.
	Acquire(ctx context.Context, name string) (Slot, error)
	// TryAcquire takes a slot if one is free and otherwise returns an
	// error matching ErrNotAcquired at once.
	TryAcquire(ctx context.Context, name string) (Slot, error)
	// Size is the semaphore's number of slots, N.
	Size() int
}

// Slot is one held slot of a semaphore: a [Fenced] lock of its own. Its
// token is greater than that of every earlier holder of any slot of the
// name; Index says which of the N slots it is (0 to N−1), and a slot's
// next holder after a loss has the same index and a greater token. Fence
// what a slot protects by the slot: the N holders are inside together, so
// one fence column shared by all N would refuse a legitimate holder whose
// token is older than another's.
type Slot interface {
	Fenced
	Index() int
}

// ErrSemaphoreSize: a semaphore acquisition asked for a size other than
// the one the name's current holders hold it with. Every backend's own
// sentinel for it matches this one through [errors.Is].
var ErrSemaphoreSize = errors.New("sqlock: semaphore held with another size")
