package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/observe"
)

// Backend is one lock backend, as its conformance_test.go declares it.
type Backend struct {
	// Name names the backend in the worker processes of the exclusion
	// test; it must be unique among the Runs of one test binary.
	Name string
	// Caps is what the backend is; the suite checks each way.
	Caps Caps
	// MinTTL is the shortest TTL the backend accepts (Caps.TTL only): the
	// suite asks for MinTTL less a nanosecond and expects a refusal.
	MinTTL time.Duration
	// BadNames are the names the backend refuses beyond "" (which every
	// backend refuses): too long, not UTF-8, with a byte it reserves.
	BadNames []string
	// BadTTLs are the TTLs the backend refuses beyond zero, negative ones
	// and MinTTL less a nanosecond (Caps.TTL only).
	BadTTLs []time.Duration
	// NotHeld is the backend's sentinel for a Release of a lock that it no
	// longer holds (released already, or taken over): the root package's
	// Lock.Release reports one of it or [sqlock.ErrLost].
	NotHeld error
	// Start brings up the backend's servers (a database, a pooler, Redis
	// servers) for one Run, in the test process only, closed when t ends,
	// and returns what reaches them: a DSN, an address, a list of them.
	Start func(t *testing.T) (target string)
	// Open reaches the servers of target: in the test process, and in
	// each worker process of the exclusion test. What it opens is closed
	// when t ends.
	Open func(t testing.TB, target string) Harness
}

// Caps are the capabilities a backend declares. A difference is declared,
// never a skipped test: the suite checks that a backend without a
// capability really lacks it.
type Caps struct {
	// Fenced: every lock is a [sqlock.Fenced] whose token is greater than
	// that of every earlier holder of its name, and whose Context carries
	// it ([sqlock.FencingToken]). Without it no lock is a sqlock.Fenced
	// (an advisory lock, a Redlock lock: no token is minted), and the
	// history's register is written unfenced.
	Fenced bool
	// TTL: locks expire unless renewed, with the TTL the suite passes in
	// [Options.TTL]; bad TTLs are refused.
	TTL bool
}

// Harness is a backend's side of the suite, on the servers of one target.
type Harness struct {
	// New returns an Acquirer of its own (another holder: a Locker or a
	// Manager of its own over the target's pool or client) configured with
	// o. It must pass o.TTL on as it is, zero or negative included.
	New func(o Options) sqlock.Acquirer
	// Unreachable returns an Acquirer configured with o whose servers
	// cannot be reached ([ClosedAddr]): a call that sends anything fails
	// with a network error, so a refusal matching
	// [sqlock.ErrInvalidArgument] shows that nothing was sent.
	Unreachable func(o Options) sqlock.Acquirer
	// Lose is the backend's own fault: it makes the servers forget lk,
	// held under name, as the backend loses a lock in production — its
	// connection killed, its TTL expired on the server, the key taken by
	// another holder — and returns once the servers no longer have name as
	// lk's: another holder may take it then, or once what took it over
	// expires. lk's holder must find out by itself (Lost closes, Err
	// matches sqlock.ErrLost), at the latest when a lock of the suite's
	// shortest TTL (3 s) would expire. The suite calls it only while lk
	// holds name.
	Lose func(ctx context.Context, name string, lk sqlock.Lock) error
}

// Options configure an Acquirer made by [Harness.New].
type Options struct {
	// TTL is each lock's TTL (a backend with Caps.TTL; ignored otherwise).
	TTL time.Duration
	// Timeout bounds every Acquire's wait (the backend's WithTimeout);
	// always positive.
	Timeout time.Duration
	// Observer, when not nil, is the backend's WithObserver.
	Observer observe.Observer
}

// The suite's durations. None is asserted: they only set how long the
// backend may take before it must give an answer.
const (
	// roomyTTL is the TTL of locks that must not expire by themselves
	// during a test, at any speed: held for milliseconds, never renewed.
	roomyTTL = time.Minute
	// lossTTL is the TTL of a lock the suite makes lose: its holder finds
	// out at its next renewal, a third of it later.
	lossTTL = 3 * time.Second
	// roomyWait bounds waits that must end by being granted.
	roomyWait = time.Minute
	// shortWait bounds waits that must run out.
	shortWait = 100 * time.Millisecond
)

// The environment of a worker process of the exclusion test.
const (
	envWorker = "LOCKTEST_WORKER" // the Backend's Name
	envTarget = "LOCKTEST_TARGET"
	envRun    = "LOCKTEST_RUN" // the run's lock-name prefix
)

// suite is one Run's state.
type suite struct {
	b      Backend
	h      Harness
	target string
	prefix string // of every lock name of the run
}

// Run runs every test of the suite on b, each as a subtest of t. In a
// worker process of its exclusion test (the test binary run again by it,
// with t's top-level test as its only test), it runs the worker's
// sections instead.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if w := os.Getenv(envWorker); w != "" {
		if w == b.Name {
			worker(t, b)
		}
		return
	}
	b.check(t)
	target := b.Start(t)
	h := b.Open(t, target)
	if h.New == nil || h.Unreachable == nil || h.Lose == nil {
		t.Fatalf("locktest: backend %q: its Harness needs New, Unreachable and Lose", b.Name)
	}
	s := &suite{b: b, h: h, target: target, prefix: "locktest:" + randomID() + ":"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, s) })
	}
}

// check refuses a declaration the suite cannot run.
func (b Backend) check(t *testing.T) {
	t.Helper()
	switch {
	case b.Name == "" || strings.ContainsAny(b.Name, "/ \n"):
		t.Fatalf("locktest: Backend.Name %q: a word without spaces or slashes", b.Name)
	case b.Start == nil || b.Open == nil:
		t.Fatalf("locktest: backend %q: Start and Open are required", b.Name)
	case b.NotHeld == nil:
		t.Fatalf("locktest: backend %q: NotHeld, its not-held sentinel, is required", b.Name)
	case b.Caps.TTL && b.MinTTL <= 0:
		t.Fatalf("locktest: backend %q has TTLs: declare its MinTTL", b.Name)
	case b.Caps.TTL && b.MinTTL > lossTTL:
		t.Fatalf("locktest: backend %q: MinTTL %v is above the suite's TTLs (%v)", b.Name, b.MinTTL, lossTTL)
	}
}

// cases are the suite's tests, in the order they run.
var cases = []struct {
	name string
	run  func(t *testing.T, s *suite)
}{
	{"TryAcquire", testTryAcquire},
	{"AcquireWaitsForRelease", testAcquireWaits},
	{"ExclusionAmongGoroutines", testExclusionAmongGoroutines},
	{"WaitBound", testWaitBound},
	{"Release", testRelease},
	{"Context", testContext},
	{"Loss", testLoss},
	{"FencingTokens", testFencingTokens},
	{"BadInput", testBadInput},
	{"ObserverPanic", testObserverPanic},
	{"ExclusionAcrossProcesses", testExclusionAcrossProcesses},
	{"HistoryUnderFaults", testHistory},
}

// name is a lock name of the run, unique to tag.
func (s *suite) name(tag string) string { return s.prefix + tag }

// acquirer is an Acquirer of its own, with roomy bounds unless o says
// otherwise.
func (s *suite) acquirer(o Options) sqlock.Acquirer {
	if o.TTL == 0 {
		o.TTL = roomyTTL
	}
	if o.Timeout == 0 {
		o.Timeout = roomyWait
	}
	return s.h.New(o)
}

// ClosedAddr is a loopback "host:port" nothing listens on (a port picked
// free and closed again), for [Harness.Unreachable].
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func randomID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// must fails t on err, saying what failed.
func must[T any](t testing.TB, what string) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// release releases lk at the end of t, reporting a failure.
func release(t testing.TB, lk sqlock.Lock) {
	t.Helper()
	if err := lk.Release(context.Background()); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// isLost reports whether lk's Lost channel is closed.
func isLost(lk sqlock.Lock) bool {
	select {
	case <-lk.Lost():
		return true
	default:
		return false
	}
}

// describe names an error's type and text for a failure message.
func describe(err error) string {
	if err == nil {
		return "nil"
	}
	return fmt.Sprintf("%T: %v", err, err)
}
