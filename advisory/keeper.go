package advisory

import (
	"sync"
	"time"
)

// checked is what the keeper checks: a held lock on a connection of its
// own, or a connection of the shared set (WithMultiplexing), whose one
// check stands for every lock on it.
type checked interface {
	// checkIfDue starts a check if one is due and none runs.
	checkIfDue(now time.Time)
}

// schedule is one checked thing's side of the keepalive: when its next
// check is due, whether one runs, and whether checks have stopped. Its
// methods are safe for concurrent use.
type schedule struct {
	mu       sync.Mutex
	next     time.Time // when the next check is due
	checking bool      // a check runs
	stopped  bool      // no more checks (released, lost or retired)
	running  sync.WaitGroup
}

// setNext makes the next check due at t.
func (s *schedule) setNext(t time.Time) {
	s.mu.Lock()
	s.next = t
	s.mu.Unlock()
}

// begin reports whether a check is due at now and none runs; if so the
// check counts as running until end.
func (s *schedule) begin(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.checking || now.Before(s.next) {
		return false
	}
	s.checking = true
	s.running.Add(1)
	return true
}

// end ends a check begun by begin; the next is due at next (zero: as it
// was, a skipped check, tried again at the next tick).
func (s *schedule) end(next time.Time) {
	s.mu.Lock()
	s.checking = false
	if !next.IsZero() {
		s.next = next
	}
	s.mu.Unlock()
	s.running.Done()
}

// stop ends the checks: none begins after it.
func (s *schedule) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// isStopped reports whether stop was called.
func (s *schedule) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// wait waits for a running check to end.
func (s *schedule) wait() { s.running.Wait() }

// keeper schedules the keepalive checks of a Locker's held locks from one
// timer, so that holding a lock costs no timer of its own: taking and
// releasing one is a map insert and delete. The timer ticks every quarter
// interval while any lock is held and stops when none is; each tick starts,
// in a goroutine of its own, the check of every lock whose check is due
// (one check per lock at a time). So a lock is checked every interval to
// 1¼ intervals.
type keeper struct {
	period time.Duration
	mu     sync.Mutex
	locks  map[checked]struct{}
	timer  *time.Timer
	armed  bool
}

func newKeeper(interval time.Duration) *keeper {
	return &keeper{period: max(interval/4, time.Millisecond), locks: map[checked]struct{}{}}
}

func (k *keeper) add(lk checked) {
	k.mu.Lock()
	defer k.mu.Unlock() // a tick waits for k.timer to be set
	k.locks[lk] = struct{}{}
	if !k.armed {
		k.armed = true
		if k.timer == nil {
			k.timer = time.AfterFunc(k.period, k.tick)
		} else {
			k.timer.Reset(k.period)
		}
	}
}

func (k *keeper) remove(lk checked) {
	k.mu.Lock()
	delete(k.locks, lk)
	k.mu.Unlock()
}

func (k *keeper) tick() {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.locks) == 0 {
		k.armed = false
		return
	}
	for lk := range k.locks {
		lk.checkIfDue(now)
	}
	k.timer.Reset(k.period)
}
