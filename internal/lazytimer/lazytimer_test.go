package lazytimer

import (
	"sync"
	"testing"
	"time"
)

// TestTimersFireInOrderNotBeforeTheirTime: timers armed in any order, some
// moved by Reset, each call its function once, not before its time, in the
// order of their times.
func TestTimersFireInOrderNotBeforeTheirTime(t *testing.T) {
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
	last := time.Duration(0)
	for range wants {
		f := <-ch
		if want := wants[f.i] * time.Millisecond; f.at < want || f.at < last {
			t.Fatalf("timer %d fired at %v, want ≥ %v and after the one before (%v)", f.i, f.at, want, last)
		}
		last = f.at
	}
	if timers[0].Stop() || timers[0].Reset(time.Millisecond) {
		t.Fatal("a timer that fired reported itself pending")
	}
	<-ch // fires again after a Reset
}

// TestStopPreventsTheCall: a stopped timer never calls its function, even
// when the shared timer fires at its old time; Stop reports whether it was
// pending.
func TestStopPreventsTheCall(t *testing.T) {
	var q Queue
	called := make(chan int, 3)
	a := q.AfterFunc(5*time.Millisecond, func() { called <- 1 })
	b := q.AfterFunc(10*time.Millisecond, func() { called <- 2 })
	if !a.Stop() || a.Stop() {
		t.Fatal("Stop: want true once, then false")
	}
	done := make(chan struct{})
	q.AfterFunc(30*time.Millisecond, func() { close(done) })
	<-done
	if got := <-called; got != 2 || len(called) != 0 {
		t.Fatalf("calls: %d then %d more, want only the unstopped timer's", got, len(called))
	}
	if b.Stop() {
		t.Fatal("Stop of a timer that fired: want false")
	}
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
