package advisory

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

// ErrNoSemaphores is the refusal of every acquisition of a
// [Locker.Semaphore]. It matches [sqlock.ErrUnsupported].
var ErrNoSemaphores = errkind.New(sqlock.ErrUnsupported,
	"advisory: no semaphores: an advisory lock has no fencing token and nowhere to keep the size; use lease.(*Manager).Semaphore")

// Semaphore is advisory's documented refusal of semaphores: every
// Acquire and TryAcquire of the SemaphoreAcquirer it returns fails with
// [ErrNoSemaphores], matching [sqlock.ErrUnsupported], and sends nothing.
//
// N advisory keys (name#0 … name#N−1, taken by try-locks in turn) would
// keep at most N holders of one size, but could not keep the promises of
// a [sqlock.SemaphoreAcquirer]: a slot is a [sqlock.Fenced] lock, and an
// advisory lock mints no token; and a caller asking for another size
// would take keys beside the others' without anyone noticing, since the
// server keeps no size beside a key. The semaphores of package lease run
// on the same PostgreSQL database and keep them. n and ttl are ignored;
// the arguments mirror the other backends' so that switching is changing
// one constructor.
func (l *Locker) Semaphore(n int, _ time.Duration) sqlock.SemaphoreAcquirer {
	return refusedSemaphore{n}
}

type refusedSemaphore struct{ n int }

func (s refusedSemaphore) Acquire(_ context.Context, name string) (sqlock.Slot, error) {
	return nil, &Error{Op: "semaphore", Err: ErrNoSemaphores, Cause: errors.New("semaphore " + strconv.Quote(name))}
}

func (s refusedSemaphore) TryAcquire(ctx context.Context, name string) (sqlock.Slot, error) {
	return s.Acquire(ctx, name)
}

func (s refusedSemaphore) Size() int { return s.n }
