package locktest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
)

// SemaphoreBackend is one backend's semaphore, as its
// semaphore_conformance_test.go declares it to [RunSemaphore].
type SemaphoreBackend struct {
	// Name names the backend in the suite's worker processes; unique
	// among the RunSemaphores of one test binary.
	Name string
	// MinTTL is the shortest TTL the backend accepts; BadNames and BadTTLs
	// are what it refuses beyond "", zero and negative TTLs.
	MinTTL   time.Duration
	BadNames []string
	BadTTLs  []time.Duration
	// NotHeld is the backend's sentinel for a Release of a slot it no
	// longer holds.
	NotHeld error
	// Start brings up the backend's servers for one run (in the test
	// process only) and returns what reaches them.
	Start func(t *testing.T) (target string)
	// Witness returns a PostgreSQL DSN (reachable from other processes)
	// where the suite counts the holders inside and keeps the register a
	// paused holder writes: target's own database, or one of its own.
	Witness func(t *testing.T, target string) (dsn string)
	// Open reaches target's servers, in the test process and in the
	// suite's worker processes; what it opens is closed when t ends.
	Open func(t testing.TB, target string) SemaphoreHarness
}

// SemaphoreHarness is a backend's side of the semaphore suite.
type SemaphoreHarness struct {
	// New returns a SemaphoreAcquirer of its own of n slots, with o's TTL
	// and wait bound, passed on as they are (bad ones included).
	New func(n int, o Options) sqlock.SemaphoreAcquirer
	// Unreachable is New on servers that cannot be reached
	// ([ClosedAddr]).
	Unreachable func(n int, o Options) sqlock.SemaphoreAcquirer
	// Lose makes the servers forget slot, held under name, as the backend
	// loses a lock (its TTL expired on the server, its lease revoked), and
	// returns once another holder may take that slot; the holder must
	// find out by itself.
	Lose func(ctx context.Context, name string, slot sqlock.Slot) error
}

// semaphoreSuite is one RunSemaphore's state.
type semaphoreSuite struct {
	b      SemaphoreBackend
	h      SemaphoreHarness
	target string
	prefix string
}

// The environment of the suite's worker processes (besides envWorker
// and envTarget).
const (
	envSemName    = "LOCKTEST_SEMAPHORE_NAME"
	envSemWitness = "LOCKTEST_SEMAPHORE_WITNESS" // its DSN and table, space-separated
)

// semWorker and semPauser are envWorker's values in b's worker processes:
// no other suite's worker answers to them.
func semWorker(backend string) string { return "semaphore:" + backend }
func semPauser(backend string) string { return "semaphore-pause:" + backend }

// RunSemaphore runs the semaphore suite on b, each test a subtest of t;
// in a worker process of the suite (the test binary run again by it), it
// runs that worker instead.
func RunSemaphore(t *testing.T, b SemaphoreBackend) {
	t.Helper()
	switch os.Getenv(envWorker) {
	case "":
	case semWorker(b.Name):
		semaphoreWorker(t, b)
		return
	case semPauser(b.Name):
		pausedSlotWorker(t, b)
		return
	default:
		return
	}
	switch {
	case b.Name == "" || strings.ContainsAny(b.Name, "/ \n"):
		t.Fatalf("locktest: SemaphoreBackend.Name %q: a word without spaces or slashes", b.Name)
	case b.Start == nil || b.Open == nil || b.Witness == nil || b.NotHeld == nil || b.MinTTL <= 0:
		t.Fatalf("locktest: semaphore backend %q: Start, Witness, Open, NotHeld and MinTTL are required", b.Name)
	}
	target := b.Start(t)
	h := b.Open(t, target)
	if h.New == nil || h.Unreachable == nil || h.Lose == nil {
		t.Fatalf("locktest: semaphore backend %q: its harness needs New, Unreachable and Lose", b.Name)
	}
	s := &semaphoreSuite{b: b, h: h, target: target, prefix: "semaphore:" + randomID() + ":"}
	for _, c := range semaphoreCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, s) })
	}
}

var semaphoreCases = []struct {
	name string
	run  func(t *testing.T, s *semaphoreSuite)
}{
	{"BadInput", testSemaphoreBadInput},
	{"ExactlyNTryAcquires", testSemaphoreExactlyN},
	{"ReleasedSlotTakenByWaiter", testSemaphoreWaiter},
	{"OtherSizeRefused", testSemaphoreOtherSize},
	{"AtMostNAmongGoroutines", testSemaphoreGoroutines},
	{"NeverTwoSizesAtOnce", testSemaphoreSizesRace},
	{"LostSlotFreed", testSemaphoreLoss},
	{"AtMostNAcrossProcesses", testSemaphoreProcesses},
	{"PausedHolderFencedOut", testSemaphorePaused},
}

// semaphore is a SemaphoreAcquirer of its own of n slots, with roomy
// bounds unless o says otherwise.
func (s *semaphoreSuite) semaphore(n int, o Options) sqlock.SemaphoreAcquirer {
	if o.TTL == 0 {
		o.TTL = roomyTTL
	}
	if o.Timeout == 0 {
		o.Timeout = roomyWait
	}
	return s.h.New(n, o)
}

// checkSlot fails t unless sl is a trusted slot of a semaphore of n.
func checkSlot(t testing.TB, sl sqlock.Slot, n int) {
	t.Helper()
	switch {
	case sl == nil:
		t.Fatal("a granted acquisition returned a nil Slot")
	case sl.Err() != nil || isLost(sl):
		t.Fatalf("a slot just granted is not trusted: %v", sl.Err())
	case sl.Index() < 0 || sl.Index() >= n:
		t.Fatalf("slot index %d outside [0, %d)", sl.Index(), n)
	case sl.Token() <= 0:
		t.Fatalf("slot token %d, want a positive fencing token", sl.Token())
	}
}

// testSemaphoreBadInput: a size below 1, a bad name or TTL is refused by
// Acquire and TryAcquire with an error matching ErrInvalidArgument, on a
// semaphore whose servers cannot be reached: nothing was sent. The same
// semaphore fails a valid call otherwise.
func testSemaphoreBadInput(t *testing.T, s *semaphoreSuite) {
	ctx := context.Background()
	valid := s.h.Unreachable(2, Options{TTL: roomyTTL, Timeout: shortWait})
	if sl, err := valid.TryAcquire(ctx, s.prefix+"input"); sl != nil || err == nil || errors.Is(err, sqlock.ErrInvalidArgument) {
		t.Fatalf("TryAcquire of a valid name on the unreachable servers: %v, %s; want a failure to reach them", sl, describe(err))
	}
	refused := func(what string, sem sqlock.SemaphoreAcquirer, name string) {
		t.Helper()
		for op, call := range map[string]func(context.Context, string) (sqlock.Slot, error){
			"Acquire": sem.Acquire, "TryAcquire": sem.TryAcquire,
		} {
			if sl, err := call(ctx, name); sl != nil || !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Errorf("%s with %s: %v, %s; want nil and an error matching ErrInvalidArgument", op, what, sl, describe(err))
			}
		}
	}
	for _, n := range []int{0, -1} {
		refused(fmt.Sprintf("the size %d", n), s.h.Unreachable(n, Options{TTL: roomyTTL, Timeout: shortWait}), s.prefix+"input")
	}
	for _, name := range append([]string{""}, s.b.BadNames...) {
		refused(fmt.Sprintf("the name %.40q", name), valid, name)
	}
	bad := append([]time.Duration{0, -time.Second}, s.b.BadTTLs...)
	if s.b.MinTTL > time.Nanosecond {
		bad = append(bad, s.b.MinTTL-time.Nanosecond)
	}
	for _, ttl := range bad {
		refused(fmt.Sprintf("the TTL %v", ttl), s.h.Unreachable(2, Options{TTL: ttl, Timeout: shortWait}), s.prefix+"input")
	}
}

// testSemaphoreExactlyN: on a free name, N TryAcquires (each from a
// semaphore of its own) get the N slots — distinct indexes, tokens strictly
// increasing — and the next gets ErrNotAcquired at once, from a wait bound
// of an hour it did not use. A release frees one slot, and only one.
func testSemaphoreExactlyN(t *testing.T, s *semaphoreSuite) {
	ctx := context.Background()
	const n = 3
	name := s.prefix + "exact"
	var held []sqlock.Slot
	defer func() {
		for _, sl := range held {
			sl.Release(ctx)
		}
	}()
	var tokens []int64
	indexes := map[int]bool{}
	for range n {
		sl := must[sqlock.Slot](t, "TryAcquire of a free slot")(s.semaphore(n, Options{}).TryAcquire(ctx, name))
		checkSlot(t, sl, n)
		held = append(held, sl)
		tokens = append(tokens, sl.Token())
		indexes[sl.Index()] = true
	}
	checkIncreasing(t, tokens)
	if len(indexes) != n {
		t.Fatalf("%d TryAcquires got the slots %v: want %d distinct", n, indexes, n)
	}
	full := s.semaphore(n, Options{Timeout: time.Hour})
	if sl, err := full.TryAcquire(ctx, name); !errors.Is(err, sqlock.ErrNotAcquired) {
		if sl != nil {
			sl.Release(ctx)
		}
		t.Fatalf("TryAcquire number %d: %s; want ErrNotAcquired", n+1, describe(err))
	}
	freed := held[1]
	if err := freed.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	held = slices.Delete(held, 1, 2)
	sl := must[sqlock.Slot](t, "TryAcquire after a release")(full.TryAcquire(ctx, name))
	held = append(held, sl)
	if sl.Index() != freed.Index() || sl.Token() <= tokens[n-1] {
		t.Errorf("after the release of slot %d: slot %d with token %d; want slot %d with a token above %d",
			freed.Index(), sl.Index(), sl.Token(), freed.Index(), tokens[n-1])
	}
	if other, err := full.TryAcquire(ctx, name); !errors.Is(err, sqlock.ErrNotAcquired) {
		if other != nil {
			other.Release(ctx)
		}
		t.Fatalf("a release freed more than one slot: TryAcquire %s", describe(err))
	}
	if err := freed.Release(ctx); !errors.Is(err, s.b.NotHeld) && !errors.Is(err, sqlock.ErrLost) {
		t.Errorf("a second Release of a released slot: %s; want the backend's not-held error", describe(err))
	}
}

// testSemaphoreWaiter: with every slot held, an Acquire waits; when a
// holder releases, the waiter gets that slot, with a greater token.
func testSemaphoreWaiter(t *testing.T, s *semaphoreSuite) {
	ctx := testCtx(t)
	const n = 2
	name := s.prefix + "waiter"
	a := must[sqlock.Slot](t, "TryAcquire")(s.semaphore(n, Options{}).TryAcquire(ctx, name))
	defer a.Release(ctx)
	b := must[sqlock.Slot](t, "TryAcquire")(s.semaphore(n, Options{}).TryAcquire(ctx, name))
	type result struct {
		sl  sqlock.Slot
		err error
	}
	got := make(chan result, 1)
	var released atomic.Bool
	go func() {
		sl, err := s.semaphore(n, Options{}).Acquire(ctx, name)
		if err == nil && !released.Load() {
			err = errors.New("granted while every slot was held")
		}
		got <- result{sl, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("Acquire returned while every slot was held: %v, %s", r.sl, describe(r.err))
	case <-time.After(shortWait):
	}
	released.Store(true)
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiter: %s", describe(r.err))
	}
	defer release(t, r.sl)
	if r.sl.Index() != b.Index() || r.sl.Token() <= b.Token() {
		t.Errorf("the waiter got slot %d token %d; want the released slot %d with a token above %d", r.sl.Index(), r.sl.Token(), b.Index(), b.Token())
	}
}

// testSemaphoreOtherSize: while a slot of a name is held with one size,
// Acquire and TryAcquire of another size (smaller and larger) are refused
// with ErrSemaphoreSize — at once, not by a wait — and take nothing; once
// every slot is free the name may be held with the other size.
func testSemaphoreOtherSize(t *testing.T, s *semaphoreSuite) {
	ctx := context.Background()
	name := s.prefix + "size"
	three := must[sqlock.Slot](t, "TryAcquire of size 3")(s.semaphore(3, Options{}).TryAcquire(ctx, name))
	for _, n := range []int{1, 2, 5} {
		other := s.semaphore(n, Options{Timeout: time.Hour})
		for op, call := range map[string]func(context.Context, string) (sqlock.Slot, error){
			"Acquire": other.Acquire, "TryAcquire": other.TryAcquire,
		} {
			if sl, err := call(ctx, name); sl != nil || !errors.Is(err, sqlock.ErrSemaphoreSize) {
				if sl != nil {
					sl.Release(ctx)
				}
				t.Errorf("%s of size %d while size 3 is held: %v, %s; want ErrSemaphoreSize", op, n, sl, describe(err))
			}
		}
	}
	more := must[sqlock.Slot](t, "TryAcquire of size 3 beside the refusals")(s.semaphore(3, Options{}).TryAcquire(ctx, name))
	release(t, more)
	release(t, three)
	two := must[sqlock.Slot](t, "TryAcquire of size 2 once the name is free")(s.semaphore(2, Options{}).TryAcquire(ctx, name))
	defer release(t, two)
	if sl, err := s.semaphore(3, Options{}).TryAcquire(ctx, name); !errors.Is(err, sqlock.ErrSemaphoreSize) {
		if sl != nil {
			sl.Release(ctx)
		}
		t.Errorf("TryAcquire of size 3 while size 2 is held: %s; want ErrSemaphoreSize", describe(err))
	}
}

// testSemaphoreGoroutines: 12 goroutines, each with a semaphore of its
// own, enter a semaphore of 3 five times each; an atomic counter of the
// holders inside never passes 3, and every goroutine gets in.
func testSemaphoreGoroutines(t *testing.T, s *semaphoreSuite) {
	ctx := testCtx(t)
	const n, goroutines, rounds = 3, 12, 5
	name := s.prefix + "goroutines"
	var inside, peak atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := s.semaphore(n, Options{})
			for range rounds {
				sl, err := sem.Acquire(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				now := inside.Add(1)
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := sl.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a goroutine: %s", describe(err))
	}
	if p := peak.Load(); p > n {
		t.Fatalf("%d holders inside a semaphore of %d", p, n)
	}
	t.Logf("at most %d of %d inside, %d sections", peak.Load(), n, goroutines*rounds)
}

// testSemaphoreLoss: after the backend's own fault on one of two held
// slots (a crashed holder's TTL running out), that holder finds out (Lost,
// Err matching ErrLost), another takes its slot with a greater token, the
// other slot is untouched, and the lost holder's Release reports the loss
// without freeing the new holder's slot.
func testSemaphoreLoss(t *testing.T, s *semaphoreSuite) {
	ctx := testCtx(t)
	const n = 2
	name := s.prefix + "loss"
	keep := must[sqlock.Slot](t, "TryAcquire")(s.semaphore(n, Options{}).TryAcquire(ctx, name))
	defer release(t, keep)
	lost := must[sqlock.Slot](t, "TryAcquire")(s.semaphore(n, Options{TTL: lossTTL}).TryAcquire(ctx, name))
	if err := s.h.Lose(ctx, name, lost); err != nil {
		lost.Release(ctx)
		t.Fatalf("the backend's Lose: %v", err)
	}
	select {
	case <-lost.Lost():
	case <-ctx.Done():
		t.Fatal("the lost slot's holder never found out")
	}
	if err := lost.Err(); !errors.Is(err, sqlock.ErrLost) {
		t.Errorf("Err after the loss: %s; want ErrLost", describe(err))
	}
	next := must[sqlock.Slot](t, "Acquire after the loss")(s.semaphore(n, Options{}).Acquire(ctx, name))
	defer release(t, next)
	if next.Index() != lost.Index() || next.Token() <= lost.Token() {
		t.Errorf("after the loss of slot %d (token %d): slot %d token %d", lost.Index(), lost.Token(), next.Index(), next.Token())
	}
	if keep.Err() != nil {
		t.Errorf("the other slot was lost too: %v", keep.Err())
	}
	if err := lost.Release(ctx); !errors.Is(err, s.b.NotHeld) && !errors.Is(err, sqlock.ErrLost) {
		t.Errorf("Release of the lost slot: %s; want the backend's not-held error or ErrLost", describe(err))
	}
	if sl, err := s.semaphore(n, Options{}).TryAcquire(ctx, name); !errors.Is(err, sqlock.ErrNotAcquired) {
		if sl != nil {
			sl.Release(ctx)
		}
		t.Fatalf("the lost holder's Release freed a slot: TryAcquire %s", describe(err))
	}
}

// testSemaphoreSizesRace: 8 goroutines race for a name, half with a
// semaphore of 2 and half of 3, by TryAcquire: a holder of one size never
// sees a holder of the other inside (counted in and out within their
// holds), and the refusals are ErrNotAcquired or ErrSemaphoreSize.
func testSemaphoreSizesRace(t *testing.T, s *semaphoreSuite) {
	ctx := testCtx(t)
	const goroutines, rounds = 8, 15
	name := s.prefix + "sizes"
	var inside [4]atomic.Int32
	var granted [4]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 2 + g%2
			sem := s.semaphore(n, Options{})
			for range rounds {
				sl, err := sem.TryAcquire(ctx, name)
				if errors.Is(err, sqlock.ErrNotAcquired) || errors.Is(err, sqlock.ErrSemaphoreSize) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				granted[n].Add(1)
				inside[n].Add(1)
				if other := inside[5-n].Load(); other > 0 {
					errs <- fmt.Errorf("a slot of size %d granted while %d of size %d were held", n, other, 5-n)
				}
				time.Sleep(time.Millisecond)
				inside[n].Add(-1)
				if err := sl.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("granted: %d of size 2, %d of size 3", granted[2].Load(), granted[3].Load())
}
