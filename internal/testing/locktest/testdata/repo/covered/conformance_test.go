package covered_test

import (
	"testing"

	lt "github.com/sqlock/sqlock/internal/testing/locktest"
)

func TestConformance(t *testing.T) {
	lt.Run(t, lt.Backend{Name: "covered"})
}
