package lockedtx

import (
	"sync/atomic"

	"github.com/sqlock/sqlock/advisory"
)

// HotKeys counts, per key, the locked attempts of txlock.DoOptimistic
// calls that share it and are waiting for the key's lock or holding it.
// While one is, the key is hot: a new call's first attempt takes the lock
// at once instead of running unlocked. Unlocked, it would barge past the
// queue — and, when it wins, the holder it overtook reads a stale row,
// fails under the lock and queues again at the back: the tail the queue is
// there to remove. A threshold of 16 was tried first, on the argument that
// with a few contenders lock-free writes (whose serial section is an
// UPDATE, a locked transaction's BEGIN to COMMIT) move more rows per
// second; on the contention sweep they did not (at 4 and 16 workers about
// txlock's throughput either way), and barging left a p99 4 to 9 times
// txlock's between 2 and 16 workers.
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

// hotQueue is the queue, in the callers sharing a HotKeys, from which a key
// is hot: one locked attempt waiting or holding, so that no call of the
// same HotKeys barges past it (docs/benchmarks.md has the sweep).
const hotQueue = 1

func (h *HotKeys) queueOf(k advisory.Key) *atomic.Int32 {
	c, o, s := k.Locktag()
	x := (uint64(c)<<32 | uint64(o)) ^ uint64(s)<<16
	return &h.queued[(x*0x9E3779B97F4A7C15)>>56]
}
