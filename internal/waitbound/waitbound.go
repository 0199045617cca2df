// Package waitbound derives a lock wait's bound from the caller's deadline:
// the server's lock_timeout must end the wait early enough that a waiter
// granted the lock at the last moment still has time for its critical
// section and its release, and that a waiter timed out hears the server's
// answer (SQLSTATE 55P03) before its context ends. The wait then ends on
// the server, the connection survives, and the caller gets a typed
// timeout; a wait cut by the context costs the connection (pgx closes it,
// and the next call pays a new one).
//
// What to keep back comes from two cheap estimates made from statements
// the packages send anyway (no extra round trip): the round trip of a
// statement that never waits (COMMIT, ROLLBACK, an unlock, a keepalive)
// and the hold time (grant to end of release). They live on a value of
// the caller's (an advisory Locker, a txlock connection), never in
// package state.
package waitbound

import (
	"sync/atomic"
	"time"
)

// Estimates are decaying estimates of a round trip and of a hold. The zero
// value has none yet. Safe for concurrent use.
type Estimates struct {
	rtt   atomic.Int64 // decaying min of non-waiting statements, ns; 0: none yet
	hold  atomic.Int64 // decaying max of grant → release done, ns; 0: none yet
	holds atomic.Int32 // holds seen, counted up to fewHolds
}

// fewHolds is how many holds an estimate needs before it alone sets the
// reserve; until then the cold reserve is kept back too if it is larger.
// (A txlock connection sees one hold in as many as its pool has
// connections.)
const fewHolds = 2

// decay is how far one sample moves an estimate toward itself when it does
// not replace it: 1/16 of the distance.
const decay = 16

// ObserveRTT records the duration of a statement that never waits for a
// lock. The estimate is a decaying minimum: a faster sample replaces it, a
// slower one raises it by 1/16 of the difference, so a scheduling stall
// does not inflate it but a slower network is followed.
func (e *Estimates) ObserveRTT(d time.Duration) {
	s := max(int64(d), 1)
	for {
		old := e.rtt.Load()
		v := s
		if old != 0 && s > old {
			v = old + (s-old)/decay
		}
		if v == old || e.rtt.CompareAndSwap(old, v) {
			return
		}
	}
}

// ObserveHold records a hold: from the grant to the end of the release
// (COMMIT, ROLLBACK or unlock). The estimate is a decaying maximum: a
// longer sample replaces it, a shorter one lowers it by 1/16 of the
// difference, so it covers the slow holds of a busy moment and forgets them
// over a few dozen holds.
func (e *Estimates) ObserveHold(d time.Duration) {
	if e.holds.Load() < fewHolds {
		e.holds.Add(1)
	}
	s := max(int64(d), 1)
	for {
		old := e.hold.Load()
		v := s
		if old != 0 && s < old {
			v = old - (old-s)/decay
		}
		if v == old || e.hold.CompareAndSwap(old, v) {
			return
		}
	}
}

// Reserve bounds.
const (
	// minReserve is the least kept back: the 55P03's trip and the
	// scheduling of the goroutine that reads it.
	minReserve = 2 * time.Millisecond
	// coldReserve caps what is kept back before any hold was seen.
	coldReserve = 50 * time.Millisecond
)

// Reserve is what a wait with remaining time to the caller's deadline keeps
// back: 1.5 times the hold estimate plus two round trips (the grant's trip
// and the release's; a timed-out waiter's 55P03), at least minReserve, and
// at least the cold reserve while fewer than fewHolds holds were seen. The
// cold reserve, before any hold was seen (e may be nil), is a fifth of
// remaining, at most coldReserve — or, when a round trip was measured
// already, the estimate with a hold of one round trip (its COMMIT) if that
// is more: 3.5 round trips, so that over a slow network a connection's
// first wait still hears its 55P03 before the deadline. Never more than
// three quarters of remaining, so that one long hold (a lock kept for
// minutes) cannot leave deadline-bound callers no time to wait at all.
//
// Too little kept back, and a waiter granted at the last moment has its
// work cut by the deadline, which costs its connection; too much, and
// every waiter gives up early, which costs successes (on a hot key the
// grant goes to the oldest waiter, which is the one about to time out, so
// nearly every grant comes with about the reserve left). Measured on a
// 2-core machine under heavy load (internal/tools/contention, 100 ms deadlines,
// -race): the hold estimate once left 1–3% of the calls cut; twice, none,
// but 5–15% fewer successes than hand-written code keeping 20 ms; 1.5
// times, at most 0.6% cut and as many successes.
func (e *Estimates) Reserve(remaining time.Duration) time.Duration {
	r := min(remaining/5, coldReserve)
	if e != nil {
		rtt, hold := e.rtt.Load(), e.hold.Load()
		if hold == 0 {
			hold = rtt // none seen: a hold lasts at least its COMMIT's round trip
		}
		if est := time.Duration(hold + hold/2 + 2*rtt); e.holds.Load() >= fewHolds {
			r = est
		} else {
			r = max(r, est)
		}
	}
	return min(max(r, minReserve), remaining*3/4)
}

// Bound returns the lock wait's bound for a call whose context has
// deadline (hasDeadline false: none): the configured bound, or, when it
// comes earlier, the time to the deadline less the reserve — then
// byDeadline is true. A bound under a millisecond means there is no time
// to wait (lock_timeout counts whole milliseconds, and 0 means forever):
// the caller returns its typed timeout at once without sending anything.
func (e *Estimates) Bound(now time.Time, configured time.Duration, deadline time.Time, hasDeadline bool) (bound time.Duration, byDeadline bool) {
	if !hasDeadline {
		return configured, false
	}
	remaining := deadline.Sub(now)
	if b := remaining - e.Reserve(remaining); b < configured {
		return b, true
	}
	return configured, false
}

// Grace is how long past the caller's deadline a lock statement whose bound
// the deadline set may still run before the client cuts it (and loses the
// connection): the server's lock_timeout answers well before, so only a
// server that does not answer at all gets there.
const Grace = time.Second
