package matrix

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Report is the JSON a module's Run writes to $MATRIX_OUT/<module>.json,
// which internal/tools/matrix renders.
type Report struct {
	Module  string        `json:"module"`
	Mode    Mode          `json:"mode"`
	Started time.Time     `json:"started"`
	Seconds float64       `json:"seconds"`
	Machine string        `json:"machine"`
	Cells   []CellResult  `json:"cells"`
	Faults  []FaultResult `json:"faults"`
}

// CellResult is one load cell's figures.
type CellResult struct {
	Mechanism  string   `json:"mechanism"`
	Group      string   `json:"group"`
	Workload   Workload `json:"workload"`
	Contenders int      `json:"contenders"`
	Keys       Keys     `json:"keys"`
	Net        Net      `json:"net"`
	Ops        int      `json:"ops"` // operations that did not fail: Done + Refused
	Done       int      `json:"done"`
	Refused    int      `json:"refused"`
	// TypedErrors match a sentinel (Typed); OtherErrors do not, and fail
	// the test.
	TypedErrors  int     `json:"typed_errors"`
	OtherErrors  int     `json:"other_errors"`
	ErrorExample string  `json:"error_example,omitempty"`
	Seconds      float64 `json:"seconds"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	P50Micros    float64 `json:"p50_us"`
	P99Micros    float64 `json:"p99_us"`
	// RoundTripsPerOp is the round trips (and requests Added) of the
	// load phase divided by its operations, failed ones included.
	RoundTripsPerOp float64 `json:"round_trips_per_op"`
	Anomalies       int     `json:"anomalies"`
	Example         string  `json:"example,omitempty"`
}

// FaultResult is one fault run's outcome.
type FaultResult struct {
	Mechanism          string   `json:"mechanism"`
	Group              string   `json:"group"`
	Fault              string   `json:"fault"`
	Workload           Workload `json:"workload"`
	Expect             Verdict  `json:"expect,omitempty"` // empty: recorded, not asserted
	Verdict            Verdict  `json:"verdict"`
	Ops                int      `json:"ops"`
	Done               int      `json:"done"`
	Refused            int      `json:"refused"`
	TypedErrors        int      `json:"typed_errors"`
	OtherErrors        int      `json:"other_errors"`
	ErrorExample       string   `json:"error_example,omitempty"`
	UnavailableSeconds float64  `json:"unavailable_seconds"`
	Anomalies          int      `json:"anomalies"`
	Example            string   `json:"example,omitempty"`
	Seconds            float64  `json:"seconds"`
	Notes              []string `json:"notes,omitempty"`
}

// write writes r to dir/<module>.json.
func (r *Report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, r.Module+".json"), append(b, '\n'), 0o644)
}

// moduleName is the last element of the module path in the nearest go.mod
// above the working directory (go test runs in the package's directory):
// "sqlock", "redislock", "etcdlock", "dynamo".
func moduleName() string {
	dir, err := os.Getwd()
	if err != nil {
		return "unknown"
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
					return filepath.Base(f[1])
				}
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "unknown"
		}
		dir = parent
	}
}

// machine describes the machine: CPUs and model, OS, Go.
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	s := fmt.Sprintf("%d CPUs", runtime.NumCPU())
	if model != "" {
		s += " (" + model + ")"
	}
	return s + ", " + runtime.GOOS + "/" + runtime.GOARCH + ", " + runtime.Version()
}
