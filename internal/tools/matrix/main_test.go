package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlock/sqlock/internal/testing/matrix"
)

// The renderer prints each cell's ratio to the best of its group in the
// same cell, the faults with their verdicts and examples, the comparison
// with the hand-written baseline, and one plot per workload it has cells
// for.
func TestRenderRatiosVerdictsAndPlots(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	cell := func(mech, group string, ops float64) matrix.CellResult {
		return matrix.CellResult{Mechanism: mech, Group: group, Workload: matrix.Stock, Contenders: 8, Keys: matrix.HotKey,
			Net: matrix.Loopback, Ops: 100, OpsPerSec: ops, P99Micros: 2500, RoundTripsPerOp: 3}
	}
	rep := matrix.Report{Module: "sqlock", Mode: matrix.Quick, Machine: "test machine",
		Cells: []matrix.CellResult{
			cell("fast", "lock", 1000), cell("slow", "lock", 250), cell("by hand: lock", "lock", 800),
			cell("other group", "optimistic", 10),
		},
		Faults: []matrix.FaultResult{{Mechanism: "slow", Group: "lock", Fault: "holder paused past TTL (unfenced)",
			Workload: matrix.Payment, Verdict: matrix.Unsafe, Ops: 12, Anomalies: 1, Example: "order k3 charged 2 times"}},
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, "sqlock.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	reports, err := load(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(out, reports, "make matrix MATRIX=quick", ""); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "matrix.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| fast | lock | 1000 ×1.00 · 2.50 ms |",
		"| slow | lock | 250 ×0.25 · 2.50 ms |",
		"| other group | optimistic | 10 ×1.00 · 2.50 ms |", // its own group's best
		"| slow | holder paused past TTL (unfenced) | payment | **unsafe** | not asserted | 12 | 1 |",
		"order k3 charged 2 times",
		"| slow | by hand: lock | 0.31 | 0.31 (stock, hot, 8, loopback) | 3.0 / 3.0 | no more round trips",
		"**not the full grid**",
		"- Command: `make matrix MATRIX=quick`",
		"**Not in this run**: module redislock, etcdlock, dynamo",
		`| <a id="by-hand-lock"></a>by hand: lock | lock | — | — | 800 ×0.80 |`,
		"holder paused past TTL (unfenced): **unsafe**",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("matrix.md lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "matrix-stock.svg")); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(out, "matrix-payment.svg")); err == nil {
		t.Error("a plot for a workload with no cell")
	}
}

// A mechanism's anchor is what docs/guide.md links to.
func TestAnchor(t *testing.T) {
	for in, want := range map[string]string{"versioned+retry": "versioned-retry", "by hand: UPDATE … WHERE version": "by-hand-update-where-version",
		"Redlock-5": "redlock-5", "lease+Guard": "lease-guard", "CAS": "cas"} {
		if got := anchor(in); got != want {
			t.Errorf("anchor(%q) = %q, want %q", in, got, want)
		}
	}
}

// An empty input directory is an error, not an empty table.
func TestRenderRefusesNoReport(t *testing.T) {
	if _, err := load(t.TempDir()); err == nil {
		t.Fatal("no error")
	}
}
