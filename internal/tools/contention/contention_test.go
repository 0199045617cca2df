package contention

import (
	"context"
	"slices"
	"testing"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Every mode keeps the count exact under contention (Run checks the row).
func TestEveryModeIsCorrect(t *testing.T) {
	db := pgtest.New(t)
	for _, mode := range slices.Concat(Modes, []Mode{HandLock, TxLockSQL}) {
		r, err := Run(context.Background(), db.DSN, mode, 8, 25)
		if err != nil {
			t.Fatal(err)
		}
		if r.Successes != 200 || len(r.Latencies) != 200 || r.Throughput <= 0 || r.P99 < r.P50 {
			t.Fatalf("%s: %+v", mode, r)
		}
		t.Logf("%s: %.0f/s p50 %v p99 %v retries %d", mode, r.Throughput, r.P50, r.P99, r.Retries)
	}
}
