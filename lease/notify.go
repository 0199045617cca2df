package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// notifier wakes waiters when a lease they wait for is released. One
// listener connection per Manager, started by the first waiter and stopped
// when the last one leaves, so no goroutine runs while nobody waits.
type notifier struct {
	b       backend
	channel string

	mu       sync.Mutex
	subs     map[string]map[*subscription]struct{}
	count    int
	run      *listenRun // the running listener, nil if none
	disabled bool       // the driver cannot LISTEN, or a pooler would lose it
	verified bool       // a listener's connection kept its server session
}

// listenRun is one listener goroutine and its connection.
type listenRun struct {
	ready     chan struct{} // closed when LISTEN is in force or the run failed
	readyOnce sync.Once
	err       error // why the run failed before ready; set before ready closes
	cancel    context.CancelFunc
}

func (r *listenRun) markReady(err error) {
	r.readyOnce.Do(func() {
		r.err = err
		close(r.ready)
	})
}

// subscription is one waiter's interest in one name.
type subscription struct {
	n    *notifier
	name string
	c    chan struct{} // one pending wake-up at most
	dead atomic.Bool   // its listener stopped: subscribe again to be woken
}

func newNotifier(b backend, channel string) *notifier {
	return &notifier{b: b, channel: channel, subs: map[string]map[*subscription]struct{}{}}
}

// subscribe registers interest in name and returns once the listener's
// LISTEN is in force: a release committed after that wakes the
// subscription.
func (n *notifier) subscribe(ctx context.Context, name string) (*subscription, error) {
	s := &subscription{n: n, name: name, c: make(chan struct{}, 1)}
	n.mu.Lock()
	if n.disabled {
		n.mu.Unlock()
		return nil, errNoListen
	}
	m := n.subs[name]
	if m == nil {
		m = map[*subscription]struct{}{}
		n.subs[name] = m
	}
	m[s] = struct{}{}
	n.count++
	run := n.run
	if run == nil {
		run = n.start()
	}
	n.mu.Unlock()
	select {
	case <-run.ready:
		if run.err != nil {
			s.close()
			return nil, run.err
		}
		return s, nil
	case <-ctx.Done():
		s.close()
		return nil, ctx.Err()
	}
}

// start runs a listener; n.mu is held.
func (n *notifier) start() *listenRun {
	ctx, cancel := context.WithCancel(context.Background())
	run := &listenRun{ready: make(chan struct{}), cancel: cancel}
	n.run = run
	go func() {
		defer cancel()
		err := n.b.listen(ctx, n.channel, func(c querier) error { return n.checkSession(ctx, c) },
			func() { run.markReady(nil) }, n.deliver)
		if err == nil || errors.Is(err, errListenDone) {
			err = errors.New("lease: listener stopped")
		}
		run.markReady(err)
		n.mu.Lock()
		defer n.mu.Unlock()
		if errors.Is(err, errNoListen) || errors.Is(err, errPooled) {
			n.disabled = true
		}
		if n.run != run {
			return // stopped because nobody waited; a newer run may serve new waiters
		}
		n.run = nil
		// The listener failed: whoever waits is woken to try again, and to
		// subscribe anew.
		for _, m := range n.subs {
			for s := range m {
				s.dead.Store(true)
				s.wake()
			}
		}
	}()
	return run
}

// checkSession probes, once per Manager, that a listener's connection
// keeps its server session (see probeSession): behind a transaction pooler
// a LISTEN lands on a pooled server connection and is never heard from, so
// the Manager's waiters poll instead.
func (n *notifier) checkSession(ctx context.Context, c querier) error {
	n.mu.Lock()
	verified := n.verified
	n.mu.Unlock()
	if verified {
		return nil
	}
	if err := probeSession(ctx, c, n.b); err != nil {
		return err
	}
	n.mu.Lock()
	n.verified = true
	n.mu.Unlock()
	return nil
}

func (n *notifier) deliver(name string) {
	n.mu.Lock()
	for s := range n.subs[name] {
		s.wake()
	}
	n.mu.Unlock()
}

func (s *subscription) wake() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// close ends the subscription; the last one stops the listener.
func (s *subscription) close() {
	if s == nil {
		return
	}
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.subs[s.name]
	if _, ok := m[s]; !ok {
		return
	}
	delete(m, s)
	if len(m) == 0 {
		delete(n.subs, s.name)
	}
	n.count--
	if n.count == 0 && n.run != nil {
		n.run.cancel()
		n.run = nil
	}
}
