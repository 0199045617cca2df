package demo

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sqlock/sqlock/observe"
)

// Stats is what one worker process reports.
type Stats struct {
	Successes int     `json:"successes"`
	Skipped   int     `json:"skipped"`   // found the work already done (payment paid, seat taken, out of stock)
	Conflicts int     `json:"conflicts"` // lost a race cleanly (stale version, CAS lost, lock busy)
	Retries   int     `json:"retries"`
	Errors    int     `json:"errors"`
	ErrSample string  `json:"err_sample,omitempty"`
	Waits     []int64 `json:"waits_ns"` // lock waits, from the observer
	Holds     []int64 `json:"holds_ns"` // lock holds, from the observer
	Elapsed   int64   `json:"elapsed_ns"`
}

func (s *Stats) add(o Stats) {
	s.Successes += o.Successes
	s.Skipped += o.Skipped
	s.Conflicts += o.Conflicts
	s.Retries += o.Retries
	s.Errors += o.Errors
	if s.ErrSample == "" {
		s.ErrSample = o.ErrSample
	}
	s.Waits = append(s.Waits, o.Waits...)
	s.Holds = append(s.Holds, o.Holds...)
	s.Elapsed = max(s.Elapsed, o.Elapsed)
}

// recorder is the demo's observer: the numbers in the tables come from the
// same events a production observer (otelobserve) would see.
type recorder struct {
	mu      sync.Mutex
	waits   []int64
	holds   []int64
	retries int
	stale   int
}

func (r *recorder) Observe(_ context.Context, e observe.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case observe.LockAcquire:
		if e.Outcome == observe.Acquired {
			r.waits = append(r.waits, int64(e.Wait))
		}
	case observe.LockRelease:
		r.holds = append(r.holds, int64(e.Hold))
	case observe.Retry:
		r.retries++
	case observe.Stale:
		r.stale++
	}
}

func percentile(ns []int64, p float64) time.Duration {
	if len(ns) == 0 {
		return -1
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return time.Duration(s[i])
}
