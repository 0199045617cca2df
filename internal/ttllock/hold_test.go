package ttllock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/observe"
)

// The holder's logic runs on timers, so it is tested in a synctest bubble,
// where time moves only when every goroutine of the bubble is blocked and
// the timers fire exactly on time: what a busy machine would make late is
// exact here. The backend is an in-memory fake.

// fake is a backend whose renewals answer from a script: answers[i] is
// the i-th renewal's error (nil: confirmed; errRefused: refused), and
// every renewal after the script is confirmed. A renewal with block set
// waits for its context to end.
type fake struct {
	mu       sync.Mutex
	answers  []error
	block    bool
	renewals []time.Time // when each renewal was sent
	ended    []time.Time // when each renewal returned
	released []time.Time // when each release was sent
	order    []string    // "renewed" and "released", as they happened
}

var errRefused = errors.New("refused")

func (f *fake) Renew(ctx context.Context) (bool, error) {
	f.mu.Lock()
	f.renewals = append(f.renewals, time.Now())
	var err error
	if len(f.answers) > 0 {
		err, f.answers = f.answers[0], f.answers[1:]
	}
	block := f.block
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		err = ctx.Err()
	}
	f.mu.Lock()
	f.ended = append(f.ended, time.Now())
	f.order = append(f.order, "renewed")
	f.mu.Unlock()
	return err == errRefused, err
}

func (f *fake) Release(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, time.Now())
	f.order = append(f.order, "released")
	return nil
}

func (f *fake) LostError(cause error) error { return cause }

// counts returns how many renewals were sent and releases made.
func (f *fake) counts() (renewals, released int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.renewals), len(f.released)
}

const (
	ttl    = 30 * time.Second
	margin = 3 * time.Second
)

func spec(obs observe.Observer) Spec {
	return Spec{TTL: ttl, Margin: margin, MarginName: "safety margin",
		RetryMin: 100 * time.Millisecond, RetryMax: time.Second,
		Observer: obs, Event: observe.Event{Source: "test", Name: "n"}}
}

// TestRenewsEveryThirdOfTheTTL: renewals are sent exactly TTL/3 after the
// acquiring request and after each other; each confirmed one moves the
// deadline to its send time + TTL − margin; Release stops them for good.
func TestRenewsEveryThirdOfTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := new(fake)
		var h Hold
		start := time.Now()
		h.Start(t.Context(), f, spec(nil), start, start)
		if got := h.Deadline(); !got.Equal(start.Add(ttl - margin)) {
			t.Fatalf("first deadline %v after the start, want TTL − margin", got.Sub(start))
		}
		time.Sleep(ttl + ttl/6) // three renewals: at TTL/3, 2TTL/3, TTL
		synctest.Wait()
		f.mu.Lock()
		for i, at := range f.renewals {
			if want := start.Add(time.Duration(i+1) * ttl / 3); !at.Equal(want) {
				t.Errorf("renewal %d at %v, want %v", i, at.Sub(start), want.Sub(start))
			}
		}
		n := len(f.renewals)
		f.mu.Unlock()
		if n != 3 {
			t.Fatalf("%d renewals in TTL + TTL/6, want 3", n)
		}
		if got, want := h.Deadline(), start.Add(ttl+ttl-margin); !got.Equal(want) {
			t.Fatalf("deadline %v after the start, want the last renewal's + TTL − margin (%v)", got.Sub(start), want.Sub(start))
		}
		if err := h.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * ttl)
		synctest.Wait()
		if renewals, released := f.counts(); renewals != 3 || released != 1 {
			t.Fatalf("after Release: %d renewals, %d releases; want 3, 1", renewals, released)
		}
		if h.Err() != nil {
			t.Fatalf("a released hold reports %v", h.Err())
		}
	})
}

// TestLostAtTheTrustWindowsEndWhenNoRenewalIsConfirmed: renewals that
// keep failing transiently are retried, and Lost fires exactly at the
// last confirmed request's send time + TTL − margin (before the server
// can expire the lock, by the margin), its error naming the last
// renewal's; the observer sees one Lost end and no release.
func TestLostAtTheTrustWindowsEndWhenNoRenewalIsConfirmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		failing := make([]error, 1000)
		for i := range failing {
			failing[i] = errors.New("connection reset")
		}
		f := &fake{answers: failing}
		var evs observetest.Recorder
		var h Hold
		start := time.Now()
		h.Start(t.Context(), f, spec(&evs), start, start)
		<-h.Lost()
		if lostAt := time.Since(start); lostAt != ttl-margin {
			t.Fatalf("Lost at %v, want TTL − margin = %v", lostAt, ttl-margin)
		}
		if err := h.Err(); err == nil || !strings.Contains(err.Error(), "no renewal confirmed in time") ||
			!strings.Contains(err.Error(), "connection reset") {
			t.Fatalf("Err: %v", err)
		}
		synctest.Wait()
		renewals, _ := f.counts()
		time.Sleep(10 * ttl)
		synctest.Wait()
		if after, _ := f.counts(); after != renewals {
			t.Fatalf("%d renewals after the loss", after-renewals)
		}
		if err := h.Release(context.Background()); err != nil { // the fake releases
			t.Fatal(err)
		}
		var ends int
		for _, e := range evs.Events() {
			if e.Kind == observe.LockRelease {
				ends++
				if e.Outcome != observe.Lost {
					t.Errorf("end event %+v, want Lost", e)
				}
			}
		}
		if ends != 1 {
			t.Fatalf("%d end events, want one Lost", ends)
		}
	})
}

// TestTransientRenewalFailuresAreRetriedWithDoublingPauses: a renewal that
// fails is tried again after RetryMin, then after pauses doubling up to
// RetryMax; each failure is a Retry event (cause "renew", the attempt, the
// pause); the first confirmation moves the deadline by its own send time,
// and the next renewal is TTL/3 after that confirmed one.
func TestTransientRenewalFailuresAreRetriedWithDoublingPauses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		transient := errors.New("i/o timeout")
		f := &fake{answers: []error{transient, transient, transient, transient, transient}}
		var evs observetest.Recorder
		var h Hold
		start := time.Now()
		h.Start(t.Context(), f, spec(&evs), start, start)
		time.Sleep(ttl/3 + 5*time.Second)
		synctest.Wait()
		// Pauses 100, 200, 400, 800 ms, then 1 s (RetryMax).
		offsets := []time.Duration{0, 100, 300, 700, 1500, 2500}
		f.mu.Lock()
		renewals := append([]time.Time(nil), f.renewals...)
		f.mu.Unlock()
		if len(renewals) != len(offsets) {
			t.Fatalf("%d renewal requests, want %d", len(renewals), len(offsets))
		}
		for i, off := range offsets {
			if want := start.Add(ttl/3 + off*time.Millisecond); !renewals[i].Equal(want) {
				t.Errorf("attempt %d at %v, want %v", i+1, renewals[i].Sub(start), want.Sub(start))
			}
		}
		confirmed := renewals[len(renewals)-1]
		if got := h.Deadline(); !got.Equal(confirmed.Add(ttl - margin)) {
			t.Fatalf("deadline %v after the start, want the confirmed renewal's + TTL − margin", got.Sub(start))
		}
		var retries []observe.Event
		for _, e := range evs.Events() {
			if e.Kind == observe.Retry {
				retries = append(retries, e)
			}
		}
		pauses := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second}
		if len(retries) != len(pauses) {
			t.Fatalf("%d Retry events, want %d", len(retries), len(pauses))
		}
		for i, e := range retries {
			if e.Cause != "renew" || e.Attempt != i+1 || e.Wait != pauses[i] || !errors.Is(e.Err, transient) || e.Name != "n" {
				t.Errorf("retry %d: %+v", i, e)
			}
		}
		time.Sleep(ttl / 3) // the next renewal: TTL/3 after the confirmed one
		synctest.Wait()
		f.mu.Lock()
		next := f.renewals[len(f.renewals)-1]
		f.mu.Unlock()
		if !next.Equal(confirmed.Add(ttl / 3)) {
			t.Fatalf("next renewal %v after the confirmed one, want TTL/3", next.Sub(confirmed))
		}
		h.Release(context.Background())
	})
}

// TestRefusedRenewalIsLostAtOnce: a renewal the server refuses (the lock
// is someone else's) ends the hold at that moment, not at the deadline,
// and no renewal follows.
func TestRefusedRenewalIsLostAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{answers: []error{errRefused}}
		var h Hold
		start := time.Now()
		h.Start(t.Context(), f, spec(nil), start, start)
		<-h.Lost()
		if lostAt := time.Since(start); lostAt != ttl/3 {
			t.Fatalf("Lost at %v, want at the refused renewal (TTL/3)", lostAt)
		}
		if !errors.Is(h.Err(), errRefused) {
			t.Fatalf("Err %v", h.Err())
		}
		time.Sleep(10 * ttl)
		synctest.Wait()
		if renewals, _ := f.counts(); renewals != 1 {
			t.Fatalf("%d renewals, want the refused one only", renewals)
		}
	})
}

// TestMaxHoldEndsTheTrustAtItsCap: with MaxHold, renewals go on until the
// deadline reaches the cap, none is sent after that, and Lost fires
// exactly at the acquiring request's send time + MaxHold, saying why.
func TestMaxHoldEndsTheTrustAtItsCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := new(fake)
		s := spec(nil)
		s.MaxHold = 100 * time.Second
		var h Hold
		start := time.Now()
		h.Start(t.Context(), f, s, start, start)
		<-h.Lost()
		if lostAt := time.Since(start); lostAt != s.MaxHold {
			t.Fatalf("Lost at %v, want MaxHold %v", lostAt, s.MaxHold)
		}
		if err := h.Err(); err == nil || !strings.Contains(err.Error(), "maximum hold time") {
			t.Fatalf("Err %v", err)
		}
		synctest.Wait()
		f.mu.Lock()
		last := f.renewals[len(f.renewals)-1]
		f.mu.Unlock()
		// The renewal at 80 s already reached the cap (80 + 27 > 100):
		// none is sent at 90 s.
		if last.Sub(start) != 80*time.Second {
			t.Fatalf("last renewal at %v, want 80s", last.Sub(start))
		}
	})
}

// panicker panics on the acquired event.
type panicker struct{}

func (panicker) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.LockAcquire {
		panic("observer")
	}
}

// TestObserverPanicOnAcquiredReleasesAndArmsNothing: Start reports the
// acquisition before arming anything; if the observer panics, the backend
// releases the lock once, the panic goes on, and no renewal is ever sent.
func TestObserverPanicOnAcquiredReleasesAndArmsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := new(fake)
		var h Hold
		func() {
			defer func() {
				if r := recover(); r != "observer" {
					t.Errorf("recovered %v", r)
				}
			}()
			start := time.Now()
			h.Start(t.Context(), f, spec(panicker{}), start, start)
		}()
		time.Sleep(10 * ttl)
		synctest.Wait()
		if renewals, released := f.counts(); renewals != 0 || released != 1 {
			t.Fatalf("%d renewals, %d releases; want 0, 1", renewals, released)
		}
	})
}

// TestReleaseWaitsForTheRenewalInFlight: a Release while a renewal is in
// flight cancels it, and sends the release only after the renewal has
// returned — so every request the renewal sent was issued first; then
// ErrReleased for a second Release, nothing sent.
func TestReleaseWaitsForTheRenewalInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{block: true}
		var h Hold
		start := time.Now()
		h.Start(t.Context(), f, spec(nil), start, start)
		time.Sleep(ttl/3 + time.Second) // the renewal is in flight, blocked
		synctest.Wait()
		if err := h.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		order := strings.Join(f.order, ", ")
		f.mu.Unlock()
		if order != "renewed, released" {
			t.Fatalf("the backend saw: %s; want the renewal to end before the release", order)
		}
		if err := h.Release(context.Background()); err != ErrReleased {
			t.Fatalf("second Release: %v", err)
		}
		if _, n := f.counts(); n != 1 {
			t.Fatalf("the second Release sent: %d releases", n)
		}
	})
}

// TestWaitEndTellsTheOwnBoundFromTheCallersDeadline: a wait ended by
// BoundWait's own bound is a timeout whose cause does not match
// context.DeadlineExceeded; one ended by the caller's deadline (also with
// a cause of the caller's) matches it; a cancellation is no timeout.
func TestWaitEndTellsTheOwnBoundFromTheCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		own, cancel := BoundWait(context.Background(), time.Second)
		defer cancel()
		<-own.Done()
		if timedOut, cause := WaitEnd(own); !timedOut || errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("own bound: %t, %v", timedOut, cause)
		}
		callerCause := errors.New("request budget")
		caller, cancelCaller := context.WithTimeoutCause(context.Background(), time.Second, callerCause)
		defer cancelCaller()
		theirs, cancel2 := BoundWait(caller, time.Hour)
		defer cancel2()
		<-theirs.Done()
		if timedOut, cause := WaitEnd(theirs); !timedOut || !errors.Is(cause, context.DeadlineExceeded) || !errors.Is(cause, callerCause) {
			t.Errorf("caller's deadline: %t, %v", timedOut, cause)
		}
		cancelled, cancel3 := context.WithCancel(context.Background())
		bounded, cancel4 := BoundWait(cancelled, time.Hour)
		defer cancel4()
		cancel3()
		if timedOut, cause := WaitEnd(bounded); timedOut || !errors.Is(cause, context.Canceled) {
			t.Errorf("cancelled: %t, %v", timedOut, cause)
		}
	})
}
