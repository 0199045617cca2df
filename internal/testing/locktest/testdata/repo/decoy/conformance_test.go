package decoy_test

import (
	"testing"

	"github.com/sqlock/sqlock/internal/testing/locktest"
)

// TestConformance mentions locktest.Run in a comment and calls t.Run.
func TestConformance(t *testing.T) {
	t.Run("closed", func(t *testing.T) { _ = locktest.ClosedAddr(t) })
}
