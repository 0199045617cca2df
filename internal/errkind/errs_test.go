package errkind_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

func TestErrorMatchesItsKindOnly(t *testing.T) {
	err := errkind.New(sqlock.ErrNilHandle, "txlock: nil %s", "database handle")
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

// TestErrorMatchesWhatItsKindMatches: an error made for another package's
// sentinel matches what that sentinel matches in turn — txlock's timeout is
// advisory's, which is sqlock's.
func TestErrorMatchesWhatItsKindMatches(t *testing.T) {
	inner := errkind.New(sqlock.ErrTimeout, "advisory: timed out")
	outer := fmt.Errorf("Do: %w", errkind.New(inner, "txlock: timed out"))
	if !errors.Is(outer, inner) || !errors.Is(outer, sqlock.ErrTimeout) {
		t.Fatal("the outer error does not match its kind's kind")
	}
	if errors.Is(outer, sqlock.ErrLost) || errors.Is(inner, outer) {
		t.Fatal("an error matches what it does not stand for")
	}
}
