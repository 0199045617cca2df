// Package schedlag measures how late this machine's timers fire while a
// test waits, so that a bound on when something is reported can allow for
// the scheduling delay the test measured rather than one guessed before it
// ran: on a busy machine the library's timer and the test's goroutine are
// late alike.
package schedlag

import (
	"sync/atomic"
	"time"
)

// Watch samples timer lateness until Stop.
type Watch struct {
	latest atomic.Int64 // nanoseconds
	stop   chan struct{}
	done   chan struct{}
}

// Start starts a Watch: a goroutine sleeping 1 ms at a time and recording
// how much later than that it woke.
func Start() *Watch {
	w := &Watch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			start := time.Now()
			time.Sleep(time.Millisecond)
			late := int64(time.Since(start) - time.Millisecond)
			for {
				cur := w.latest.Load()
				if late <= cur || w.latest.CompareAndSwap(cur, late) {
					break
				}
			}
		}
	}()
	return w
}

// Latest is the latest a timer fired since Start.
func (w *Watch) Latest() time.Duration { return time.Duration(w.latest.Load()) }

// Stop ends the sampling and returns Latest. It is safe to call more than
// once.
func (w *Watch) Stop() time.Duration {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.Latest()
}
