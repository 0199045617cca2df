package advisory

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestBounds: every bounded wait that is still pending at its deadline ends
// then (not before) with context.DeadlineExceeded, whatever the order the
// deadlines arrive in; a finished wait is never ended by the timer; a
// cancelled caller's context ends the wait with its error; nothing stays
// pending.
func TestBounds(t *testing.T) {
	b := newBounds()
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(time.Duration(rand.IntN(40)) * time.Millisecond)
			switch i % 4 {
			case 0: // finished before its deadline
				c := b.start(context.Background(), deadline.Add(time.Second))
				b.finish(c)
				time.Sleep(time.Until(deadline.Add(time.Second + 20*time.Millisecond)))
				if err := c.Err(); err != nil {
					t.Errorf("a finished wait was ended: %v", err)
				}
			case 1: // the caller's context ends first
				parent, cancel := context.WithCancel(context.Background())
				c := b.start(parent, deadline.Add(time.Minute))
				cancel()
				select {
				case <-c.Done():
				case <-time.After(10 * time.Second):
					t.Error("a cancelled caller did not end the wait")
					return
				}
				if !errors.Is(c.Err(), context.Canceled) {
					t.Errorf("cancelled: Err() = %v", c.Err())
				}
				b.finish(c)
			default: // runs into its deadline
				c := b.start(context.Background(), deadline)
				select {
				case <-c.Done():
				case <-time.After(10 * time.Second):
					t.Errorf("a wait bound to %v was not ended 10 s later", time.Until(deadline))
					return
				}
				if time.Now().Before(deadline) {
					t.Error("a wait ended before its deadline")
				}
				if c.Err() != context.DeadlineExceeded {
					t.Errorf("Err() = %v, want context.DeadlineExceeded", c.Err())
				}
				if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
					t.Errorf("Deadline() = %v, %v", d, ok)
				}
				b.finish(c)
			}
		}()
	}
	wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) != 0 {
		t.Fatalf("%d waits still pending", len(b.pending))
	}
}
