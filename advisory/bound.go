package advisory

import (
	"context"
	"sync"
	"time"
)

// bounds ends acquisitions' waits for a pooled connection at their wait
// bound, all of a Locker's from one timer. A context.WithDeadline per
// acquisition would start and stop a runtime timer every time, and adding
// a timer wakes the network poller of an otherwise idle process: on a small
// machine that costs more than the rest of the package on the TryLock +
// Release path. Here the timer is armed for the earliest pending bound and
// left alone when a wait ends; as bounds of later acquisitions come later,
// back-to-back acquisitions touch it about once per bound, not once each.
type bounds struct {
	mu      sync.Mutex
	timer   *time.Timer
	armedAt time.Time // when the timer fires; zero while it is not armed
	pending map[*boundCtx]struct{}
}

func newBounds() *bounds { return &bounds{pending: map[*boundCtx]struct{}{}} }

// boundCtx is the context an acquisition waits for its connection with: the
// caller's context, ending at deadline too (then Err is
// context.DeadlineExceeded).
type boundCtx struct {
	context.Context
	deadline time.Time
	done     chan struct{}
	stop     func() bool // stops following the caller's cancellation

	mu  sync.Mutex
	err error
}

func (c *boundCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *boundCtx) Done() <-chan struct{}       { return c.done }

func (c *boundCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *boundCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// start returns a context that ends with parent or at deadline (which must
// come before parent's own deadline, if any). Call finish when the wait is
// over.
func (b *bounds) start(parent context.Context, deadline time.Time) *boundCtx {
	c := &boundCtx{Context: parent, deadline: deadline, done: make(chan struct{})}
	if parent.Done() != nil {
		c.stop = context.AfterFunc(parent, func() { c.end(parent.Err()) })
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending[c] = struct{}{}
	if b.armedAt.IsZero() || deadline.Before(b.armedAt) {
		b.arm(deadline)
	}
	return c
}

// finish stops bounding c. The timer stays armed: it fires, finds nothing
// due, and re-arms for the earliest wait still pending, if any.
func (b *bounds) finish(c *boundCtx) {
	if c.stop != nil {
		c.stop()
	}
	b.mu.Lock()
	delete(b.pending, c)
	b.mu.Unlock()
}

// arm sets the timer to fire at t. b.mu is held.
func (b *bounds) arm(t time.Time) {
	b.armedAt = t
	if b.timer == nil {
		b.timer = time.AfterFunc(time.Until(t), b.fire)
		return
	}
	b.timer.Reset(time.Until(t))
}

// fire ends the waits that are due and re-arms for the next one.
func (b *bounds) fire() {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var next time.Time
	for c := range b.pending {
		if !now.Before(c.deadline) {
			delete(b.pending, c)
			c.end(context.DeadlineExceeded)
		} else if next.IsZero() || c.deadline.Before(next) {
			next = c.deadline
		}
	}
	b.armedAt = time.Time{}
	if !next.IsZero() {
		b.arm(next)
	}
}
