package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/observe"
)

// testBadInput: an empty name, the backend's other bad names and, where
// it has TTLs, a zero, negative or too short TTL (and its other bad ones)
// are refused by Acquire and TryAcquire with an error matching
// ErrInvalidArgument, on an Acquirer whose servers cannot be reached: the
// refusal came before anything was sent. The same Acquirer fails a valid
// call otherwise, which shows that it would have noticed a send.
func testBadInput(t *testing.T, s *suite) {
	ctx := context.Background()
	valid := s.h.Unreachable(Options{TTL: roomyTTL, Timeout: shortWait})
	lk, err := valid.TryAcquire(ctx, s.name("input"))
	if lk != nil || err == nil || errors.Is(err, sqlock.ErrInvalidArgument) {
		t.Fatalf("TryAcquire of a valid name on the unreachable servers: %v, %s; want a failure to reach them", lk, describe(err))
	}
	refused := func(what string, acq sqlock.Acquirer, name string) {
		t.Helper()
		for op, call := range map[string]func(context.Context, string) (sqlock.Lock, error){
			"Acquire": acq.Acquire, "TryAcquire": acq.TryAcquire,
		} {
			if lk, err := call(ctx, name); lk != nil || !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Errorf("%s with %s: %v, %s; want nil and an error matching ErrInvalidArgument", op, what, lk, describe(err))
			}
		}
	}
	for _, name := range append([]string{""}, s.b.BadNames...) {
		refused(fmt.Sprintf("the name %.40q", name), valid, name)
	}
	if !s.b.Caps.TTL {
		return
	}
	bad := append([]time.Duration{0, -time.Second}, s.b.BadTTLs...)
	if s.b.MinTTL > time.Nanosecond {
		bad = append(bad, s.b.MinTTL-time.Nanosecond)
	}
	for _, ttl := range bad {
		refused(fmt.Sprintf("the TTL %v", ttl), s.h.Unreachable(Options{TTL: ttl, Timeout: shortWait}), s.name("input"))
	}
}

// panicOnAcquired panics with itself on the first acquisition it is told
// of, and reports every later one.
type panicOnAcquired struct {
	done     atomic.Bool
	acquired atomic.Int32
}

func (p *panicOnAcquired) Observe(_ context.Context, e observe.Event) {
	if e.Kind != observe.LockAcquire || e.Outcome != observe.Acquired {
		return
	}
	if p.done.CompareAndSwap(false, true) {
		panic(p)
	}
	p.acquired.Add(1)
}

// testObserverPanic: an observer that panics on the acquired event gets
// its own panic back out of Acquire and TryAcquire with the lock released,
// not left to expire: another holder takes the name well within its TTL. The Acquirer goes on
// working, and reports to the observer.
func testObserverPanic(t *testing.T, s *suite) {
	ctx := context.Background()
	other := s.acquirer(Options{Timeout: roomyTTL / 3})
	for op, call := range map[string]func(sqlock.Acquirer, context.Context, string) (sqlock.Lock, error){
		"Acquire": sqlock.Acquirer.Acquire, "TryAcquire": sqlock.Acquirer.TryAcquire,
	} {
		t.Run(op, func(t *testing.T) {
			obs := new(panicOnAcquired)
			acq := s.acquirer(Options{Observer: obs})
			name := s.name("panic:" + op)
			var recovered any
			func() {
				defer func() { recovered = recover() }()
				lk, err := call(acq, ctx, name)
				t.Errorf("%s returned %v, %v: the observer's panic did not propagate", op, lk, err)
			}()
			if recovered != obs {
				t.Fatalf("recovered %v, want the observer's own panic", recovered)
			}
			// Acquire, not TryAcquire: a backend may release by closing the
			// lock's connection, which the server sees a moment later.
			// Its bound is a third of the lock's TTL: a lock left to
			// expire would not be free by then.
			lk, err := other.Acquire(ctx, name)
			if err != nil {
				t.Fatalf("after the observer's panic, Acquire by another holder: %s; the panicked lock was not released", describe(err))
			}
			release(t, lk)
			again := must[sqlock.Lock](t, "the Acquirer after its observer's panic")(call(acq, ctx, name))
			s.checkFresh(t, again)
			release(t, again)
			if n := obs.acquired.Load(); n != 1 {
				t.Errorf("the observer was told of %d acquisitions after its panic, want 1", n)
			}
		})
	}
}
