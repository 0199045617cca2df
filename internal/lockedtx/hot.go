package lockedtx

import (
	"sync/atomic"

	"github.com/sqlock/sqlock/advisory"
)

// HotKeys counts, per key, the attempts of txlock.DoOptimistic calls that
// share it and are running: the locked ones (waiting for the key's lock or
// holding it) and the lock-free first ones. While a locked one runs, or
// hotBurst lock-free ones run at once, the key is hot: a new call's first
// attempt takes the lock at once instead of running unlocked.
//
// Unlocked behind a queue, it would barge past it — and, when it wins, the
// holder it overtook reads a stale row, fails under the lock and queues
// again at the back: the tail the queue is there to remove. A threshold of
// 16 queued was tried first, on the argument that with a few contenders
// lock-free writes (whose serial section is an UPDATE, a locked
// transaction's BEGIN to COMMIT) move more rows per second; on the
// contention sweep they did not (at 4 and 16 workers about txlock's
// throughput either way), and barging left a p99 4 to 9 times txlock's
// between 2 and 16 workers. The burst is the other way in: many calls that
// start on a cold key at once (the queue drained, and a crowd of requests
// arrives) all run lock-free, all but one conflict, and each of those pays
// a lock-free attempt and then the whole queue; with hotBurst of them in
// flight the rest queue at once.
//
// It is a hint, never a guarantee: a fixed table of 256 counters (2 KiB,
// nothing to allocate or leak, however many keys), indexed by a hash of the
// key. Keys that share a slot only add up their counts; correctness never
// depends on it (every attempt guards its writes). Only the calls sharing
// the HotKeys are counted: the caller decides the scope (one per handle,
// usually), and other processes' attempts are each process's own.
type HotKeys struct {
	slots [256]hotSlot
}

// hotSlot is the counts of the keys that hash to it: locked attempts in the
// low 32 bits, lock-free ones above.
type hotSlot struct{ n atomic.Int64 }

const (
	// hotQueue is the count of locked attempts, in the callers sharing a
	// HotKeys, from which a key is hot: one waiting or holding, so that no
	// call of the same HotKeys barges past it (docs/benchmarks.md has the
	// sweep).
	hotQueue = 1
	// hotBurst is the most lock-free first attempts that run on a key at
	// once: with a few, two rarely read the same version (at 2 workers, 87
	// of 4,000 optimistic increments conflicted); a crowd that starts
	// together all read it, and all but one conflict.
	hotBurst = 4

	oneLocked   = 1
	oneLockFree = 1 << 32
)

// slot is k's counts.
func (h *HotKeys) slot(k advisory.Key) *hotSlot {
	c, o, s := k.Locktag()
	x := (uint64(c)<<32 | uint64(o)) ^ uint64(s)<<16
	return &h.slots[(x*0x9E3779B97F4A7C15)>>56]
}

// enterLockFree counts a lock-free first attempt and reports whether it may
// run, the key not hot; if not, nothing stays counted. One that may calls
// leaveLockFree when it ends.
func (s *hotSlot) enterLockFree() bool {
	v := s.n.Add(oneLockFree)
	if v&(oneLockFree-1) < hotQueue && v>>32 <= hotBurst {
		return true
	}
	s.n.Add(-oneLockFree)
	return false
}

func (s *hotSlot) leaveLockFree() { s.n.Add(-oneLockFree) }
func (s *hotSlot) enterLocked()   { s.n.Add(oneLocked) }
func (s *hotSlot) leaveLocked()   { s.n.Add(-oneLocked) }
