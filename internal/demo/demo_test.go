package demo

import (
	"context"
	"io"
	"testing"

	"github.com/sqlock/sqlock/internal/pgtest"
)

func TestMain(m *testing.M) {
	MaybeWorker() // the coordinator re-executes this test binary as replicas
	pgtest.Main(m)
}

// TestDemo runs every scenario with real OS processes: the naive strategy
// must really show its anomaly, and every mechanism must show none.
func TestDemo(t *testing.T) {
	db := pgtest.New(t)
	type result struct {
		stats     Stats
		anomalies int
	}
	got := map[string]map[string]result{}
	err := Run(context.Background(), Config{DSN: db.DSN, Out: io.Discard, Progress: io.Discard,
		Rows: func(sc, st string, s Stats, anomalies int) {
			if got[sc] == nil {
				got[sc] = map[string]result{}
			}
			got[sc][st] = result{s, anomalies}
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios {
		for _, st := range sc.strategies {
			r, ok := got[sc.name][st.name]
			if !ok {
				t.Errorf("%s/%s did not run", sc.name, st.name)
				continue
			}
			t.Logf("%s/%s: ok %d skipped %d anomalies %d conflicts %d retries %d errors %d",
				sc.name, st.name, r.stats.Successes, r.stats.Skipped, r.anomalies,
				r.stats.Conflicts, r.stats.Retries, r.stats.Errors)
			if r.stats.Errors != 0 {
				t.Errorf("%s/%s: %d errors, first: %s", sc.name, st.name, r.stats.Errors, r.stats.ErrSample)
			}
			switch {
			case st.name == "naive" && r.anomalies == 0:
				t.Errorf("%s/naive showed no anomaly: the race window is not real", sc.name)
			case st.name != "naive" && r.anomalies != 0:
				t.Errorf("%s/%s: %d anomalies", sc.name, st.name, r.anomalies)
			}
		}
	}
}
