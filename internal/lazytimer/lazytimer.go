// Package lazytimer is time.AfterFunc for timers that are mostly stopped
// before they fire, such as a held lock's renewal and deadline: all of a
// [Queue]'s timers share one runtime timer, armed at the earliest of them,
// and Stop leaves it armed. Each lock manager owns a Queue; there is no
// process-wide state.
//
// Why: arming a runtime timer ahead of every other timer on its P makes the
// Go scheduler wake an idle thread so that the new deadline is watched
// (runtime.wakeNetPoller). A lock taken and released in a few round trips
// would pay that wake-up for each of its timers — on a busy two-core
// machine more than a round trip to a local Redis. Here a timer due after
// the one already armed costs a heap insertion under a mutex, and a
// stopped timer's runtime timer fires once, finds nothing due, and re-arms
// at the next timer (or not at all).
package lazytimer

import (
	"container/heap"
	"sync"
	"time"
)

// Timer is a timer made by [AfterFunc]. Its methods are safe for
// concurrent use.
type Timer struct {
	q     *Queue
	f     func()
	when  time.Time // monotonic
	index int       // in the queue's heap; -1 when not pending
}

// Queue is a set of lazy timers sharing one runtime timer. The zero value
// is ready to use; a Queue must not be copied after first use.
type Queue struct {
	mu    sync.Mutex
	h     timerHeap
	rt    *time.Timer // runs fire; nil until the first timer
	armed time.Time   // when rt is due; zero when it is not pending
}

// AfterFunc waits for d and then calls f in its own goroutine, as
// time.AfterFunc does; Stop cancels the call.
func (q *Queue) AfterFunc(d time.Duration, f func()) *Timer {
	t := &Timer{q: q, f: f, index: -1}
	t.Reset(d)
	return t
}

// Reset changes the timer to expire after d; it reports whether the timer
// was pending.
func (t *Timer) Reset(d time.Duration) bool {
	when := time.Now().Add(d)
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	pending := t.index >= 0
	t.when = when
	if pending {
		heap.Fix(&q.h, t.index)
	} else {
		heap.Push(&q.h, t)
	}
	q.arm(when)
	return pending
}

// Stop prevents the timer from firing; it reports whether it was pending.
// The shared runtime timer stays armed.
func (t *Timer) Stop() bool {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&q.h, t.index)
	return true
}

// arm makes the runtime timer due no later than when. q.mu is held.
func (q *Queue) arm(when time.Time) {
	if !q.armed.IsZero() && !when.Before(q.armed) {
		return // the runtime timer fires first, and re-arms
	}
	q.armed = when
	if q.rt == nil {
		q.rt = time.AfterFunc(time.Until(when), q.fire)
		return
	}
	q.rt.Reset(time.Until(when))
}

// fire is the runtime timer's function (in a goroutine of its own): it
// re-arms at the next timer and calls every timer that is due, each in a
// goroutine of its own.
func (q *Queue) fire() {
	q.mu.Lock()
	q.armed = time.Time{}
	now := time.Now()
	var due []*Timer
	for len(q.h) > 0 && !q.h[0].when.After(now) {
		due = append(due, heap.Pop(&q.h).(*Timer))
	}
	if len(q.h) > 0 {
		q.arm(q.h[0].when)
	}
	q.mu.Unlock()
	for i, t := range due {
		if i == len(due)-1 {
			t.f() // in the runtime timer's own goroutine, as time.AfterFunc would
			break
		}
		go t.f()
	}
}

// timerHeap orders timers by when (container/heap).
type timerHeap []*Timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].when.Before(h[j].when) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*Timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
