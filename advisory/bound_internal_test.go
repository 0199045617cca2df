package advisory

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestBounds: every bounded wait that is still pending at its deadline ends
// exactly then with context.DeadlineExceeded, whatever the order the
// deadlines arrive in; a finished wait is never ended by the timer; a
// cancelled caller's context ends the wait at once with its error; nothing
// stays pending. (In a synctest bubble: the one timer's schedule is exact.)
func TestBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBounds()
		var wg sync.WaitGroup
		for i := range 400 {
			wg.Go(func() {
				deadline := time.Now().Add(time.Duration(rand.IntN(40)) * time.Millisecond)
				switch i % 4 {
				case 0: // finished before its deadline
					c := b.start(context.Background(), deadline.Add(time.Second))
					b.finish(c)
					time.Sleep(time.Until(deadline.Add(2 * time.Second)))
					if err := c.Err(); err != nil {
						t.Errorf("a finished wait was ended: %v", err)
					}
				case 1: // the caller's context ends first
					parent, cancel := context.WithCancel(context.Background())
					c := b.start(parent, deadline.Add(time.Minute))
					cancelled := time.Now()
					cancel()
					<-c.Done()
					if !errors.Is(c.Err(), context.Canceled) || !time.Now().Equal(cancelled) {
						t.Errorf("cancelled: Err() = %v %v after the cancel", c.Err(), time.Since(cancelled))
					}
					b.finish(c)
				default: // runs into its deadline
					c := b.start(context.Background(), deadline)
					<-c.Done()
					if !time.Now().Equal(deadline) {
						t.Errorf("a wait bound to its deadline ended %v after it", time.Since(deadline))
					}
					if c.Err() != context.DeadlineExceeded {
						t.Errorf("Err() = %v, want context.DeadlineExceeded", c.Err())
					}
					if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
						t.Errorf("Deadline() = %v, %v", d, ok)
					}
					b.finish(c)
				}
			})
		}
		wg.Wait()
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.pending) != 0 {
			t.Fatalf("%d waits still pending", len(b.pending))
		}
	})
}
