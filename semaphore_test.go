package sqlock_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/lease"
)

// TestSemaphoreAcquirerIsNoAcquirer: a SemaphoreAcquirer's methods return
// a Slot, so no semaphore of N is ever usable where one holder is
// expected; a Slot is a Fenced lock.
func TestSemaphoreAcquirerIsNoAcquirer(t *testing.T) {
	sem := reflect.TypeFor[sqlock.SemaphoreAcquirer]()
	if sem.Implements(reflect.TypeFor[sqlock.Acquirer]()) {
		t.Fatal("a SemaphoreAcquirer is an Acquirer: code that needs one holder would get N")
	}
	if !reflect.TypeFor[sqlock.Slot]().Implements(reflect.TypeFor[sqlock.Fenced]()) {
		t.Fatal("a Slot is not a Fenced lock")
	}
	var _ sqlock.Slot = (*lease.Slot)(nil)
}

// TestSemaphoreSizeErrorsMatchTheRoot: the backends' size errors match
// ErrSemaphoreSize (and nothing else of the root's), and advisory's
// refusal matches ErrUnsupported.
func TestSemaphoreSizeErrorsMatchTheRoot(t *testing.T) {
	if !errors.Is(lease.ErrSemaphoreSize, sqlock.ErrSemaphoreSize) {
		t.Error("lease.ErrSemaphoreSize does not match sqlock.ErrSemaphoreSize")
	}
	refused := fmt.Errorf("acquire: %w", lease.ErrSemaphoreSize)
	for _, other := range []error{sqlock.ErrNotAcquired, sqlock.ErrTimeout, sqlock.ErrInvalidArgument} {
		if errors.Is(refused, other) {
			t.Errorf("lease.ErrSemaphoreSize matches %v", other)
		}
	}
	if !errors.Is(advisory.ErrNoSemaphores, sqlock.ErrUnsupported) {
		t.Error("advisory.ErrNoSemaphores does not match sqlock.ErrUnsupported")
	}
}
