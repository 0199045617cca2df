package etcdlock_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sqlock/sqlock/etcdlock"
)

// electionBenchTTL is the leaderships' TTL: long enough that none
// expires during a run, so that every failover is a resignation.
const electionBenchTTL = 10 * time.Second

// BenchmarkElectionFailover: a leader resigns while another candidate
// waits in its campaign; ms/failover is the time from the Resign to the
// waiting candidate's Campaign returning (its identity announced), on the
// shared three-member cluster, beside etcd's own concurrency.Election in
// the same run (one session per candidate, made once, as that API wants).
func BenchmarkElectionFailover(b *testing.B) {
	ctx := context.Background()
	cl := sharedClient(b)
	b.Run("etcdlock", func(b *testing.B) {
		lk := etcdlock.New(cl)
		name := fmt.Sprintf("bench-failover-%d", time.Now().UnixNano())
		cands := [2]*etcdlock.Candidate{lk.Candidate(name, "a", electionBenchTTL), lk.Candidate(name, "b", electionBenchTTL)}
		var leads [2]*etcdlock.Leadership
		var err error
		if leads[0], err = cands[0].Campaign(ctx); err != nil {
			b.Fatal(err)
		}
		failovers(b, cl, etcdlock.DefaultPrefix+url.PathEscape(name)+"/",
			func(next int) (err error) { leads[next], err = cands[next].Campaign(ctx); return err },
			func(cur int) error { return leads[cur].Resign(ctx) })
	})
	b.Run("concurrency.Election", func(b *testing.B) {
		prefix := fmt.Sprintf("sqlock-bench/election-%d", time.Now().UnixNano())
		var elections [2]*concurrency.Election
		for i := range elections {
			s, err := concurrency.NewSession(cl, concurrency.WithTTL(int(electionBenchTTL/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			elections[i] = concurrency.NewElection(s, prefix)
		}
		if err := elections[0].Campaign(ctx, "a"); err != nil {
			b.Fatal(err)
		}
		failovers(b, cl, prefix+"/",
			func(next int) error { return elections[next].Campaign(ctx, fmt.Sprint(next)) },
			func(cur int) error { return elections[cur].Resign(ctx) })
	})
}

// failovers runs b.N failovers between candidates 0 and 1, 0 leading
// first: each round, the other candidate's campaign starts, and once its
// key is in line (two keys under prefix) the leader resigns; the time from
// the resignation to the campaign's return is reported as ms/failover.
// The last leader resigns at the end.
func failovers(b *testing.B, cl *clientv3.Client, prefix string, campaign, resign func(candidate int) error) {
	ctx := b.Context()
	var total time.Duration
	cur := 0
	for i := 0; i < b.N; i++ {
		next := 1 - cur
		won := make(chan error, 1)
		go func() { won <- campaign(next) }()
		for {
			resp, err := cl.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				b.Fatal(err)
			}
			if resp.Count == 2 {
				break
			}
			select {
			case err := <-won:
				b.Fatalf("the campaign ended before its key was in line: %v", err)
			case <-ctx.Done():
				b.Fatal("the campaign's key never joined the line")
			case <-time.After(time.Millisecond):
			}
		}
		start := time.Now()
		if err := resign(cur); err != nil {
			b.Fatal(err)
		}
		if err := <-won; err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		cur = next
	}
	if err := resign(cur); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/failover")
	b.ReportMetric(0, "ns/op") // the loop's own time includes the waits in line
}
