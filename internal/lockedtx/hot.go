package lockedtx

import (
	"sync/atomic"

	"github.com/sqlock/sqlock/advisory"
)

// HotKeys counts, per key, the locked attempts of txlock.DoOptimistic
// calls that share it and are waiting for the key's lock or holding it.
// While hotQueue or more are, the key is hot: a new call's first attempt
// takes the lock at once instead of running unlocked. Unlocked, it would
// barge past the queue — and, when it wins, the holder it overtook reads a
// stale row, fails under the lock and queues again at the back: the tail
// the queue is there to remove. Below hotQueue, lock-free first attempts
// win more than they cost: an optimistic write's serial section is its
// UPDATE and COMMIT, a locked transaction's is BEGIN to COMMIT, so with a
// few contenders optimistic writes move more rows per second than a queue.
//
// It is a hint, never a guarantee: a fixed table of 256 counters (1 KiB,
// nothing to allocate or leak, however many keys), indexed by a hash of the
// key. Keys that share a slot only add up their queues; correctness never
// depends on it (every attempt guards its writes). Only the calls sharing
// the HotKeys are counted: the caller decides the scope (one per handle,
// usually), and other processes' queues are each process's own.
type HotKeys struct {
	queued [256]atomic.Int32
}

// hotQueue is the queue, in the callers sharing a HotKeys, past which a
// key is hot: where, on the contention sweep (docs/benchmarks.md),
// lock-free retries stop adding throughput and start making the tail.
const hotQueue = 16

func (h *HotKeys) queueOf(k advisory.Key) *atomic.Int32 {
	c, o, s := k.Locktag()
	x := (uint64(c)<<32 | uint64(o)) ^ uint64(s)<<16
	return &h.queued[(x*0x9E3779B97F4A7C15)>>56]
}
