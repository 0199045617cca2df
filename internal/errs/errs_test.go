package errs_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errs"
)

func TestErrorMatchesItsKindOnly(t *testing.T) {
	err := errs.New(sqlock.ErrNilHandle, "txlock: nil %s", "database handle")
	if got, want := err.Error(), "txlock: nil database handle"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("Do: %w", err)
	if !errors.Is(wrapped, sqlock.ErrNilHandle) {
		t.Fatal("errors.Is(wrapped, ErrNilHandle) = false")
	}
	if errors.Is(wrapped, sqlock.ErrInvalidOption) || errors.Is(wrapped, sqlock.ErrUnsupported) {
		t.Fatal("the error matches a sentinel it does not stand for")
	}
}
