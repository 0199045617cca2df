package locktest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/exclusiontest"
)

// The exclusion test's shape: 3 processes × 4 goroutines × 8 sections on
// 2 names.
const (
	procs      = 3
	goroutines = 4
	sections   = 8
	procKeys   = 2
)

// testExclusionAcrossProcesses: worker processes — the test binary run
// again with the top-level test as its only test, each with its own
// Acquirer — take a few names many times at once, and a witness in files
// (exclusiontest.Files) checks that no two sections of a name overlap and,
// where fenced, that each holder's token is above the one before it.
func testExclusionAcrossProcesses(t *testing.T, s *suite) {
	top, _, _ := strings.Cut(t.Name(), "/")
	cfg := exclusiontest.Config{Procs: procs, Goroutines: goroutines, Keys: procKeys, N: sections,
		Worker: func(int) *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(top)+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), envWorker+"="+s.b.Name, envTarget+"="+s.target, envRun+"="+s.prefix)
			return cmd
		}}
	sum := exclusiontest.RunFiles(t, cfg)
	t.Logf("%d sections in %d processes without overlap (%d locks lost and reported)", sum.Sections, procs, sum.Lost)
}

// worker is Run in a worker process: the sections its parent asked for,
// then the one line of results the parent reads.
func worker(t *testing.T, b Backend) {
	w, err := exclusiontest.OpenFiles()
	if err != nil {
		t.Fatal(err)
	}
	h := b.Open(t, os.Getenv(envTarget))
	acq := h.New(Options{TTL: roomyTTL, Timeout: roomyWait})
	prefix := os.Getenv(envRun)
	const work = 2 * time.Millisecond
	exclusiontest.Child(func(ctx context.Context, me string, k int) exclusiontest.Outcome {
		lk, err := acq.Acquire(ctx, fmt.Sprintf("%sprocs:%d", prefix, k))
		if err != nil {
			return exclusiontest.Outcome{Err: err}
		}
		var o exclusiontest.Outcome
		if f, ok := lk.(sqlock.Fenced); ok && b.Caps.Fenced {
			tok := f.Token()
			o.Err = exclusiontest.Section(
				func() (int64, error) { return w.EnterFenced(k, me, tok) },
				func() (int64, error) { return w.LeaveFenced(k, me, tok) }, work)
		} else {
			o.Err = exclusiontest.Section(
				func() (int64, error) { return w.Enter(k, me) },
				func() (int64, error) { return w.Leave(k, me) }, work)
		}
		if errors.Is(o.Err, exclusiontest.ErrOverlap) && lk.Err() != nil {
			// Fenced out after a loss its holder was told of: the
			// section runs again.
			o = exclusiontest.Outcome{Lost: true, Redo: true}
		}
		if err := lk.Release(ctx); err != nil && o.Err == nil {
			if lk.Err() != nil {
				o.Lost = true
			} else {
				o.Err = err
			}
		}
		return o
	})
}
