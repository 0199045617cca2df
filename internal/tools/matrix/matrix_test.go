package main

import (
	"testing"

	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// pgFaults are the faults faults_test.go attaches to the load rows, by
// Mechanism; it adds them in an init function.
var pgFaults = map[string][]matrix.Fault{}

// faultRows are rows faults_test.go adds for a fault only (a mechanism in
// a form no load row has, such as a lease written without its token).
var faultRows []matrix.Row

// TestMatrix is the root module's part of make matrix: the load rows of
// every mechanism of the root module, their faults, on the grid MATRIX
// names (see internal/testing/matrix).
func TestMatrix(t *testing.T) {
	rows := loadRows()
	attached := map[string]bool{}
	for i := range rows {
		rows[i].Faults = append(rows[i].Faults, pgFaults[rows[i].Mechanism]...)
		attached[rows[i].Mechanism] = true
	}
	for m := range pgFaults {
		if !attached[m] {
			t.Errorf("faults for %q, which no load row is", m)
		}
	}
	matrix.Run(t, append(rows, faultRows...)...)
}

func loadRows() []matrix.Row { return nil }
