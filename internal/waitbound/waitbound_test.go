package waitbound

import (
	"testing"
	"time"
)

// The reserve: a fifth of the remaining time (at most 50 ms) before any
// hold was seen, or 3.5 round trips when one was measured and that is
// more; then 1.5 times the hold plus two round trips, not less
// than the cold reserve until a few holds were seen; never under 2 ms nor
// over three quarters of the remaining time.
func TestReserveFollowsTheEstimates(t *testing.T) {
	var e Estimates
	if got := e.Reserve(100 * time.Millisecond); got != 20*time.Millisecond {
		t.Fatalf("cold reserve at 100 ms: %v, want 20ms", got)
	}
	if got := (*Estimates)(nil).Reserve(time.Second); got != coldReserve {
		t.Fatalf("cold reserve at 1 s: %v, want %v", got, coldReserve)
	}
	e.ObserveRTT(time.Millisecond)
	if got := e.Reserve(time.Second); got != coldReserve {
		t.Fatalf("a round trip of 1 ms and no hold: %v, want the cold reserve %v", got, coldReserve)
	}
	var slow Estimates // a first round trip of 100 ms, no hold yet
	slow.ObserveRTT(100 * time.Millisecond)
	if got := slow.Reserve(3 * time.Second); got != 350*time.Millisecond {
		t.Fatalf("a round trip of 100 ms and no hold: %v, want 3.5 round trips, 350ms", got)
	}
	if got := slow.Reserve(400 * time.Millisecond); got != 300*time.Millisecond {
		t.Fatalf("the same at 400 ms: %v, want three quarters, 300ms", got)
	}
	e.ObserveHold(5 * time.Millisecond)
	if got := e.Reserve(time.Second); got != coldReserve {
		t.Fatalf("after one hold: %v, want the cold reserve %v", got, coldReserve)
	}
	for range fewHolds {
		e.ObserveHold(5 * time.Millisecond)
	}
	if got := e.Reserve(time.Second); got != 9500*time.Microsecond {
		t.Fatalf("reserve with hold 5 ms and round trip 1 ms: %v, want 9.5ms", got)
	}
	if got := e.Reserve(8 * time.Millisecond); got != 6*time.Millisecond {
		t.Fatalf("reserve at 8 ms: %v, want three quarters, 6ms", got)
	}
	e.ObserveHold(time.Hour)
	if got := e.Reserve(100 * time.Millisecond); got != 75*time.Millisecond {
		t.Fatalf("reserve after an hour-long hold: %v, want three quarters, 75ms", got)
	}
	var fast Estimates
	fast.ObserveRTT(time.Microsecond)
	for range fewHolds {
		fast.ObserveHold(10 * time.Microsecond)
	}
	if got := fast.Reserve(time.Second); got != minReserve {
		t.Fatalf("reserve of fast holds: %v, want %v", got, minReserve)
	}
}

// The round trip is a decaying minimum and the hold a decaying maximum:
// a sample on the near side replaces the estimate, one on the far side
// moves it by a sixteenth of the difference.
func TestEstimatesDecay(t *testing.T) {
	var e Estimates
	e.ObserveRTT(time.Millisecond)
	e.ObserveRTT(17 * time.Millisecond)
	if got := time.Duration(e.rtt.Load()); got != 2*time.Millisecond {
		t.Fatalf("rtt after 1 ms then 17 ms: %v, want 2ms", got)
	}
	e.ObserveRTT(time.Microsecond)
	if got := time.Duration(e.rtt.Load()); got != time.Microsecond {
		t.Fatalf("rtt after a faster sample: %v", got)
	}
	e.ObserveHold(33 * time.Millisecond)
	e.ObserveHold(time.Millisecond)
	if got := time.Duration(e.hold.Load()); got != 31*time.Millisecond {
		t.Fatalf("hold after 33 ms then 1 ms: %v, want 31ms", got)
	}
	e.ObserveHold(time.Second)
	if got := time.Duration(e.hold.Load()); got != time.Second {
		t.Fatalf("hold after a longer sample: %v", got)
	}
}

// The bound is the configured one unless the deadline less the reserve
// comes first; then it says so.
func TestBound(t *testing.T) {
	now := time.Now()
	var e Estimates
	if b, by := e.Bound(now, 5*time.Second, time.Time{}, false); b != 5*time.Second || by {
		t.Fatalf("no deadline: %v, %v", b, by)
	}
	if b, by := e.Bound(now, 5*time.Second, now.Add(100*time.Millisecond), true); b != 80*time.Millisecond || !by {
		t.Fatalf("100 ms deadline: %v, %v; want 80ms by the deadline", b, by)
	}
	if b, by := e.Bound(now, 10*time.Millisecond, now.Add(100*time.Millisecond), true); b != 10*time.Millisecond || by {
		t.Fatalf("10 ms timeout, 100 ms deadline: %v, %v", b, by)
	}
}
