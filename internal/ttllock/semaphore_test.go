package ttllock

import (
	"context"
	"errors"
	"testing"

	"github.com/sqlock/sqlock"
)

// TestSemaphoreCheckSize: sizes outside [1, MaxSemaphoreSize] are refused.
func TestSemaphoreCheckSize(t *testing.T) {
	for _, n := range []int{0, -1, MaxSemaphoreSize + 1} {
		if CheckSize(n) == nil {
			t.Errorf("CheckSize(%d) = nil, want a refusal", n)
		}
	}
	for _, n := range []int{1, 3, MaxSemaphoreSize} {
		if err := CheckSize(n); err != nil {
			t.Errorf("CheckSize(%d) = %v", n, err)
		}
	}
}

type nilSlot struct{ sqlock.Slot }

// TestSemaphoreAcquirerNeverReturnsATypedNil: a failed acquisition through
// the adapter is a nil sqlock.Slot, not a typed nil; Size is the n given.
func TestSemaphoreAcquirerNeverReturnsATypedNil(t *testing.T) {
	fail := func(context.Context, string) (*nilSlot, error) { return nil, errors.New("refused") }
	sem := SemaphoreAcquirer(fail, fail, 3)
	for op, call := range map[string]func(context.Context, string) (sqlock.Slot, error){
		"Acquire": sem.Acquire, "TryAcquire": sem.TryAcquire,
	} {
		if sl, err := call(context.Background(), "x"); sl != nil || err == nil {
			t.Errorf("%s: %#v, %v; want a nil Slot and the error", op, sl, err)
		}
	}
	if sem.Size() != 3 {
		t.Errorf("Size %d, want 3", sem.Size())
	}
}
