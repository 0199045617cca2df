package main

import (
	"math"
	"strings"
	"testing"
)

const sampleRun = `pkg: github.com/sqlock/sqlock/txlock
BenchmarkUncontended/pgx-2   100   1 ns/op   600 unlocked-µs/tx   3 unlocked-roundtrips/op   400 locked-µs/tx   3 locked-roundtrips/op   800 naive-µs/tx   4 naive-roundtrips/op
BenchmarkUncontended/pgx-2   100   1 ns/op   500 unlocked-µs/tx   3 unlocked-roundtrips/op   500 locked-µs/tx   3 locked-roundtrips/op   700 naive-µs/tx   4 naive-roundtrips/op
BenchmarkUncontended/pgx-2   100   1 ns/op   300 unlocked-µs/tx   3 unlocked-roundtrips/op   600 locked-µs/tx   4 locked-roundtrips/op   600 naive-µs/tx   4 naive-roundtrips/op
pkg: github.com/sqlock/sqlock/gormplugin
BenchmarkPostgresPaired/map-2   10   1 ns/op   2000 plain-ns/call   3 plain-roundtrips/op   1.25 ratio   2500 versioned-ns/call   3 versioned-roundtrips/op
`

// TestTargetsComeFromTheRunOutput: a target row's ratio is the median of
// each run's baseline time over the form's time, its times and round
// trips the medians of the run's own figures, and its verdict follows the
// target and, where asked, equal round trips.
func TestTargetsComeFromTheRunOutput(t *testing.T) {
	benches := parse(sampleRun)
	locked := evaluate(benches, comparison{pkg: "txlock", bench: "Uncontended/pgx", base: "unlocked-µs/tx", form: "locked-µs/tx",
		baseRT: "unlocked-roundtrips/op", formRT: "locked-roundtrips/op", min: 0.97, sameTrips: true})
	// Runs: 600/400 = 1.5, 500/500 = 1, 300/600 = 0.5 → median 1.
	if !locked.found || locked.ratio != 1 || len(locked.runs) != 3 || locked.baseUs != 500 || locked.formUs != 500 {
		t.Fatalf("locked row: %+v", locked)
	}
	if locked.baseRT != 3 || locked.formRT != 3 || !locked.met {
		t.Fatalf("locked row: round trips %v/%v, met %v", locked.formRT, locked.baseRT, locked.met)
	}
	naive := evaluate(benches, comparison{pkg: "txlock", bench: "Uncontended/pgx", base: "unlocked-µs/tx", form: "naive-µs/tx",
		baseRT: "unlocked-roundtrips/op", formRT: "naive-roundtrips/op", min: 0.5, sameTrips: true})
	if naive.met || naive.formRT != 4 {
		t.Fatalf("a form with more round trips met a same-round-trips target: %+v", naive)
	}
	gorm := evaluate(benches, comparison{pkg: "gormplugin", bench: "PostgresPaired/map", base: "plain-ns/call", form: "versioned-ns/call", min: 0.98})
	if math.Abs(gorm.ratio-0.8) > 1e-9 || gorm.baseUs != 2 || gorm.met {
		t.Fatalf("gorm row: %+v", gorm)
	}
	missing := evaluate(benches, comparison{pkg: "idem", bench: "IdempotentTx", base: "plain-ns/op", form: "idem-ns/op", min: 0.9})
	if missing.found {
		t.Fatalf("a benchmark absent from the run was found: %+v", missing)
	}
	var b strings.Builder
	targetsTable(&b, benches, []comparison{{label: "absent", pkg: "idem", bench: "IdempotentTx", base: "plain-ns/op", form: "idem-ns/op", min: 0.9}})
	if !strings.Contains(b.String(), "not in this run") {
		t.Fatalf("an absent benchmark is not marked:\n%s", b.String())
	}
}
