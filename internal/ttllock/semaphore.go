package ttllock

import (
	"context"
	"fmt"

	"github.com/sqlock/sqlock"
)

// MaxSemaphoreSize is the largest semaphore size a backend is asked to
// keep: each slot is a row element, a hash field or a key, read by every
// attempt.
const MaxSemaphoreSize = 1 << 16

// CheckSize refuses a semaphore size outside [1, MaxSemaphoreSize]: the
// cause of the package's Invalid error, made before anything is sent.
func CheckSize(n int) error {
	if n < 1 || n > MaxSemaphoreSize {
		return fmt.Errorf("semaphore size %d is outside [1, %d]", n, MaxSemaphoreSize)
	}
	return nil
}

// SemaphoreAcquirer is a package's sqlock.SemaphoreAcquirer of n slots
// that last ttl: acquire and try take a slot of name (method values of the
// package's semaphore, which may be nil). A failed acquisition's typed nil
// slot never becomes a non-nil sqlock.Slot.
func SemaphoreAcquirer[S sqlock.Slot](acquire, try func(context.Context, string) (S, error), n int) sqlock.SemaphoreAcquirer {
	return semaphore[S]{acquire, try, n}
}

type semaphore[S sqlock.Slot] struct {
	acquire, try func(context.Context, string) (S, error)
	n            int
}

func (s semaphore[S]) Acquire(ctx context.Context, name string) (sqlock.Slot, error) {
	return asSlot(s.acquire(ctx, name))
}

func (s semaphore[S]) TryAcquire(ctx context.Context, name string) (sqlock.Slot, error) {
	return asSlot(s.try(ctx, name))
}

func (s semaphore[S]) Size() int { return s.n }

func asSlot[S sqlock.Slot](l S, err error) (sqlock.Slot, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

// SizeMismatch is the cause of a package's ErrSemaphoreSize: the size
// asked for and the one the name is held with.
func SizeMismatch(asked, held int) error {
	return fmt.Errorf("asked for %d slots; its holders hold it with %d", asked, held)
}
