package lazytimer

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The timers are tested in a synctest bubble, where they fire exactly at
// their time: "at its time, in order" is asserted exactly, not within a
// window a busy machine could miss.

// TestTimersFireAtTheirTimeInOrder: timers armed in any order, one moved
// by Reset, each call their function once, exactly at their time, in the
// order of their times; a timer that fired is not pending, and fires again
// after a Reset.
func TestTimersFireAtTheirTimeInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q Queue
		start := time.Now()
		type fired struct {
			i  int
			at time.Duration
		}
		ch := make(chan fired, 10)
		wants := []time.Duration{30, 10, 50, 20, 40} // ms
		timers := make([]*Timer, len(wants))
		for i, w := range wants {
			timers[i] = q.AfterFunc(w*time.Millisecond, func() { ch <- fired{i, time.Since(start)} })
		}
		if !timers[2].Reset(5 * time.Millisecond) { // 50 → 5: now the first
			t.Fatal("Reset of a pending timer reported it not pending")
		}
		wants[2] = 5
		order := []int{2, 1, 3, 0, 4}
		for _, i := range order {
			f := <-ch
			if f.i != i || f.at != wants[i]*time.Millisecond {
				t.Fatalf("timer %d fired at %v; want timer %d at %v", f.i, f.at, i, wants[i]*time.Millisecond)
			}
		}
		if timers[0].Stop() || timers[0].Reset(time.Millisecond) {
			t.Fatal("a timer that fired reported itself pending")
		}
		if f := <-ch; f.i != 0 || f.at != 41*time.Millisecond { // the last one fired at 40 ms
			t.Fatalf("after Reset: timer %d at %v, want timer 0 at 41ms", f.i, f.at)
		}
	})
}

// TestStopPreventsTheCall: a stopped timer never calls its function, even
// when the shared timer fires at its old time; Stop reports whether it was
// pending.
func TestStopPreventsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q Queue
		called := make(chan int, 3)
		a := q.AfterFunc(5*time.Millisecond, func() { called <- 1 })
		b := q.AfterFunc(10*time.Millisecond, func() { called <- 2 })
		if !a.Stop() || a.Stop() {
			t.Fatal("Stop: want true once, then false")
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := <-called; got != 2 || len(called) != 0 {
			t.Fatalf("calls: %d then %d more, want only the unstopped timer's", got, len(called))
		}
		if b.Stop() {
			t.Fatal("Stop of a timer that fired: want false")
		}
	})
}

// TestAStoppedTimerLeavesTheSharedTimerHarmless: after the only pending
// timer is stopped, the shared runtime timer still fires at its old time,
// finds nothing due and calls nothing; a timer armed later fires at its own
// time.
func TestAStoppedTimerLeavesTheSharedTimerHarmless(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q Queue
		start := time.Now()
		q.AfterFunc(time.Second, func() { t.Error("a stopped timer fired") }).Stop()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		done := make(chan time.Duration, 1)
		q.AfterFunc(time.Second, func() { done <- time.Since(start) })
		if at := <-done; at != 3*time.Second {
			t.Fatalf("fired at %v, want 3s", at)
		}
	})
}

// TestConcurrentUse: many goroutines arming, moving and stopping timers
// (under -race); every timer left pending fires once.
func TestConcurrentUse(t *testing.T) {
	var q Queue
	var wg sync.WaitGroup
	var fired sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				tm := q.AfterFunc(time.Hour, func() { t.Error("a stopped timer fired") })
				tm.Reset(time.Hour + time.Duration(g+i)*time.Microsecond)
				tm.Stop()
				if i%50 == 0 {
					fired.Add(1)
					q.AfterFunc(time.Duration(i)*time.Microsecond, fired.Done)
				}
			}
		})
	}
	wg.Wait()
	fired.Wait()
}
