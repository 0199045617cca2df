package etcdlock_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/sqlock/sqlock/etcdlock/internal/etcdtest"
	"github.com/sqlock/sqlock/internal/testing/exclusiontest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// TestExclusionAcrossProcesses: 4 OS processes × 8 goroutines × 40
// acquisitions on 4 lock names with random hold times, on a cluster of
// three: 1,280 fenced sections, each holder's token above the one before
// it; PostgreSQL checks that no two sections of a name overlap.
func TestExclusionAcrossProcesses(t *testing.T) {
	c := etcdtest.New(t, 3)
	db := pgtest.New(t)
	cfg := exclusiontest.Config{Procs: 4, Goroutines: 8, Keys: 4, N: 40, Worker: func(int) *exec.Cmd {
		return child(c, "exclusion", "ETCD_CHILD_DSN="+db.DSN, "ETCD_CHILD_TTL=10s")
	}}
	sum := exclusiontest.Run(t, db, cfg)
	t.Logf("%d processes × %d goroutines × %d sections on %d names = %d acquisitions, 0 overlaps, %d locks lost under load (reported), in %v",
		cfg.Procs, cfg.Goroutines, cfg.N, cfg.Keys, sum.Sections, sum.Lost, sum.Took.Round(time.Millisecond))
}
