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
