package locktest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
)

// ElectionBackend is one backend's leader election, as its
// election_conformance_test.go declares it to [RunElection].
type ElectionBackend struct {
	// Name names the backend in the suite's candidate processes; unique
	// among the RunElections of one test binary.
	Name string
	// BadNames are the election names the backend refuses beyond "".
	BadNames []string
	// Start brings up the backend's servers for one run (in the test
	// process only, closed when t ends) and returns what reaches them.
	Start func(t *testing.T) (target string)
	// Proxy puts a proxy in front of target's servers and returns a
	// target that reaches them through it, and the proxy's stall (every
	// byte held: a partition) and resume.
	Proxy func(t *testing.T, target string) (proxied string, stall, resume func())
	// Register returns a PostgreSQL DSN (reachable from other processes)
	// where the suite keeps the register its leaders write fenced by their
	// terms: target's own database, or one of its own.
	Register func(t *testing.T, target string) (dsn string)
	// Open reaches target's servers, in the test process and in the
	// suite's candidate processes; what it opens is closed when t ends.
	Open func(t testing.TB, target string) ElectionHarness
}

// ElectionHarness is a backend's side of the election suite.
type ElectionHarness struct {
	// New returns a candidate with o's name, identity, TTL and wait bound
	// (the backend's WithTimeout), passed on as they are.
	New func(o Candidate) sqlock.Election
	// Unreachable is New on servers that cannot be reached
	// ([ClosedAddr]): whatever is sent fails with a network error.
	Unreachable func(o Candidate) sqlock.Election
}

// Candidate configures a candidate made by [ElectionHarness.New].
type Candidate struct {
	Name, Identity string
	TTL            time.Duration
	Timeout        time.Duration // the backend's WithTimeout; always positive
}

// electTTL is the TTL of leaderships the suite deposes (killed, paused,
// cut off): the next leader waits for it to expire. etcd grants no lease
// shorter than 1.5 of its election timeouts (2 s by default).
const electTTL = 2 * time.Second

// electionSuite is one RunElection's state.
type electionSuite struct {
	b      ElectionBackend
	h      ElectionHarness
	target string
	prefix string // of every election name of the run
}

// RunElection runs the election suite on b, each test a subtest of t; in
// a candidate process of the suite (the test binary run again by it), it
// runs that candidate instead.
func RunElection(t *testing.T, b ElectionBackend) {
	t.Helper()
	if w := os.Getenv(envWorker); w != "" {
		if w == electionWorkerName(b.Name) {
			electionWorker(t, b)
		}
		return
	}
	switch {
	case b.Name == "" || strings.ContainsAny(b.Name, "/ \n"):
		t.Fatalf("locktest: ElectionBackend.Name %q: a word without spaces or slashes", b.Name)
	case b.Start == nil || b.Open == nil || b.Proxy == nil || b.Register == nil:
		t.Fatalf("locktest: election backend %q: Start, Proxy, Register and Open are required", b.Name)
	}
	target := b.Start(t)
	h := b.Open(t, target)
	if h.New == nil || h.Unreachable == nil {
		t.Fatalf("locktest: election backend %q: its harness needs New and Unreachable", b.Name)
	}
	s := &electionSuite{b: b, h: h, target: target, prefix: "election:" + randomID() + ":"}
	for _, c := range electionCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, s) })
	}
}

var electionCases = []struct {
	name string
	run  func(t *testing.T, s *electionSuite)
}{
	{"BadInput", testElectionBadInput},
	{"CampaignLeaderResign", testCampaignLeaderResign},
	{"CampaignOutlastsWaitBound", testCampaignOutlastsWaitBound},
	{"Observe", testObserve},
	{"OneLeaderPerTerm", testOneLeaderPerTerm},
	{"OneLeaderPerTermAcrossProcesses", testTermsAcrossProcesses},
	{"PartitionedLeaderLostBeforeNextWins", testPartitionedLeaderLost},
	{"KilledLeaderProcess", testKilledLeader},
	{"PausedLeaderProcessFencedOut", testPausedLeader},
	{"PartitionedLeaderProcessFencedOut", testPartitionedLeaderProcess},
}

// candidate is a candidate of the run's election tag, with roomy bounds
// unless o says otherwise.
func (s *electionSuite) candidate(tag, identity string, o Candidate) sqlock.Election {
	o.Name, o.Identity = s.prefix+tag, identity
	if o.TTL == 0 {
		o.TTL = roomyTTL
	}
	if o.Timeout == 0 {
		o.Timeout = roomyWait
	}
	return s.h.New(o)
}

// campaign wins e's election within the test's bound, or fails t saying
// who never won.
func campaign(ctx context.Context, t testing.TB, e sqlock.Election, who string) sqlock.Leadership {
	t.Helper()
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatalf("%s never won the election: %v", who, describe(err))
	}
	return l
}

// testCtx is a context that ends before the test's deadline, for waits
// that must end on their condition.
func testCtx(t *testing.T) context.Context {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		t.Cleanup(cancel)
	}
	return ctx
}

// resign resigns l, reporting a failure.
func resign(t testing.TB, l sqlock.Leadership) {
	t.Helper()
	if err := l.Resign(context.Background()); err != nil {
		t.Errorf("Resign: %v", describe(err))
	}
}

// testElectionBadInput: a bad name, identity or TTL is refused by
// Campaign, Leader and Observe with an error matching ErrInvalidArgument,
// on servers that cannot be reached (anything sent would fail otherwise);
// a good candidate there fails otherwise.
func testElectionBadInput(t *testing.T, s *electionSuite) {
	ctx := testCtx(t)
	good := Candidate{Name: s.prefix + "bad", Identity: "host-1", TTL: roomyTTL, Timeout: shortWait}
	var bad []Candidate
	for _, id := range []string{"", strings.Repeat("i", 256), "\xff\xfe", "a\x00b"} {
		c := good
		c.Identity = id
		bad = append(bad, c)
	}
	for _, n := range append([]string{""}, s.b.BadNames...) {
		c := good
		c.Name = n
		bad = append(bad, c)
	}
	for _, ttl := range []time.Duration{0, -time.Second} {
		c := good
		c.TTL = ttl
		bad = append(bad, c)
	}
	for _, c := range bad {
		e := s.h.Unreachable(c)
		l, err := e.Campaign(ctx)
		if l != nil || !errors.Is(err, sqlock.ErrInvalidArgument) {
			t.Errorf("Campaign of %q as %q (TTL %v): %v, %v; want ErrInvalidArgument", c.Name, c.Identity, c.TTL, l, describe(err))
		}
		if _, _, err := e.Leader(ctx); !errors.Is(err, sqlock.ErrInvalidArgument) {
			t.Errorf("Leader of %q as %q: %v; want ErrInvalidArgument", c.Name, c.Identity, describe(err))
		}
		if ch, err := e.Observe(ctx); ch != nil || !errors.Is(err, sqlock.ErrInvalidArgument) {
			t.Errorf("Observe of %q as %q: %v; want ErrInvalidArgument", c.Name, c.Identity, describe(err))
		}
	}
	// The same call of a good candidate reaches for the servers, and
	// fails for that (or at the bound of its retries: a client that dials
	// again until its context ends).
	dial, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, _, err := s.h.Unreachable(good).Leader(dial); err == nil || errors.Is(err, sqlock.ErrInvalidArgument) || errors.Is(err, sqlock.ErrNoLeader) {
		t.Errorf("Leader of a good candidate on unreachable servers: %v; want the network's error", describe(err))
	}
}

// testCampaignLeaderResign: the winner is the leader every candidate
// reads, with its identity and its term (its fencing token, which its
// Context carries); a rival's campaign waits (ending at its context's
// deadline as a timeout); after a resignation nobody leads until the
// rival wins, with a greater term.
func testCampaignLeaderResign(t *testing.T, s *electionSuite) {
	ctx := testCtx(t)
	a := s.candidate("resign", "host-a", Candidate{})
	b := s.candidate("resign", "host-b", Candidate{})
	if _, _, err := b.Leader(ctx); !errors.Is(err, sqlock.ErrNoLeader) {
		t.Fatalf("Leader of a new election: %v; want ErrNoLeader", describe(err))
	}
	la := campaign(ctx, t, a, "host-a")
	if la.Identity() != "host-a" || la.Token() <= 0 {
		t.Fatalf("leadership: identity %q term %d; want host-a and a positive term", la.Identity(), la.Token())
	}
	for _, e := range []sqlock.Election{a, b} {
		id, term, err := e.Leader(ctx)
		if err != nil || id != "host-a" || term != la.Token() {
			t.Fatalf("Leader: %q, %d, %v; want host-a, %d", id, term, describe(err), la.Token())
		}
	}
	lctx, cancel := la.Context(ctx)
	if tok, ok := sqlock.FencingToken(lctx); !ok || tok != la.Token() {
		t.Fatalf("the leadership's Context carries token %d (%t), want the term %d", tok, ok, la.Token())
	}
	cancel()
	short, cancel := context.WithTimeout(ctx, shortWait)
	lb, err := b.Campaign(short)
	cancel()
	if lb != nil || !errors.Is(err, sqlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("rival's Campaign until its deadline: %v, %v; want ErrTimeout matching context.DeadlineExceeded", lb, describe(err))
	}
	resign(t, la)
	if _, _, err := b.Leader(ctx); !errors.Is(err, sqlock.ErrNoLeader) {
		t.Fatalf("Leader after the resignation: %v; want ErrNoLeader", describe(err))
	}
	lb = campaign(ctx, t, b, "host-b")
	if lb.Token() <= la.Token() {
		t.Fatalf("term %d after term %d", lb.Token(), la.Token())
	}
	if id, term, err := a.Leader(ctx); err != nil || id != "host-b" || term != lb.Token() {
		t.Fatalf("Leader: %q, %d, %v; want host-b, %d", id, term, describe(err), lb.Token())
	}
	if err := la.Resign(ctx); err == nil {
		t.Fatal("a second Resign of a leadership returned nil")
	}
	resign(t, lb)
}

// testCampaignOutlastsWaitBound: a campaign lasts as long as its
// context, not the backend's wait bound: a candidate whose WithTimeout
// ran out many times while another led still wins when it resigns.
func testCampaignOutlastsWaitBound(t *testing.T, s *electionSuite) {
	ctx := testCtx(t)
	la := campaign(ctx, t, s.candidate("outlast", "host-a", Candidate{}), "host-a")
	won := make(chan error, 1)
	go func() {
		l, err := s.candidate("outlast", "host-b", Candidate{Timeout: shortWait}).Campaign(ctx)
		if err == nil {
			err = l.Resign(context.Background())
		}
		won <- err
	}()
	time.Sleep(5 * shortWait) // several of host-b's wait bounds; not asserted
	resign(t, la)
	if err := <-won; err != nil {
		t.Fatalf("campaign whose wait bound ran out while another led: %v; want it to win", describe(err))
	}
}

// testObserve: an observer reads nobody, then each leader in turn with
// its term, then nobody again; its channel closes when its context ends.
func testObserve(t *testing.T, s *electionSuite) {
	ctx := testCtx(t)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := s.candidate("observe", "watcher", Candidate{}).Observe(octx)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	expect := func(want sqlock.Leader) { t.Helper(); observed(ctx, t, ch, want) }
	expect(sqlock.Leader{})
	var last int64
	for _, id := range []string{"host-a", "host-b"} {
		l := campaign(ctx, t, s.candidate("observe", id, Candidate{}), id)
		if l.Token() <= last {
			t.Fatalf("term %d after %d", l.Token(), last)
		}
		last = l.Token()
		expect(sqlock.Leader{Identity: id, Term: l.Token()})
		resign(t, l)
	}
	expect(sqlock.Leader{})
	stop()
	for range ch { // drains, and ends only if the channel is closed
	}
}

// testOneLeaderPerTerm: candidates in many goroutines campaign again and
// again; no two lead at once, each win's term is above every earlier
// one's, and while a candidate leads every candidate reads it as the
// leader with its term.
func testOneLeaderPerTerm(t *testing.T, s *electionSuite) {
	ctx := testCtx(t)
	const candidates, rounds = 6, 5
	var (
		mu      sync.Mutex
		leading string
		last    int64
		terms   = map[int64]string{}
	)
	var wg sync.WaitGroup
	for i := range candidates {
		id := fmt.Sprintf("candidate-%d", i)
		e := s.candidate("terms", id, Candidate{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := e.Campaign(ctx)
				if err != nil {
					t.Errorf("%s never won: %v", id, describe(err))
					return
				}
				mu.Lock()
				if leading != "" {
					t.Errorf("%s won term %d while %s led", id, l.Token(), leading)
				}
				if l.Token() <= last {
					t.Errorf("%s won term %d after term %d", id, l.Token(), last)
				}
				if other, dup := terms[l.Token()]; dup {
					t.Errorf("term %d won by %s and %s", l.Token(), other, id)
				}
				leading, last, terms[l.Token()] = id, l.Token(), id
				mu.Unlock()
				if got, term, err := e.Leader(ctx); err != nil || got != id || term != l.Token() {
					t.Errorf("Leader while %s leads term %d: %q, %d, %v", id, l.Token(), got, term, describe(err))
				}
				mu.Lock()
				leading = ""
				mu.Unlock()
				if err := l.Resign(ctx); err != nil {
					t.Errorf("%s: Resign: %v", id, describe(err))
				}
			}
		}()
	}
	wg.Wait()
	if len(terms) != candidates*rounds {
		t.Fatalf("%d terms won, want %d", len(terms), candidates*rounds)
	}
}

// testPartitionedLeaderLost: the leader's connection is stalled (a
// partition) while the servers stay up. Another candidate wins, with a
// greater term, only after the cut-off leader's Lost has fired: when the
// new leader's Campaign returns, the old leadership is already lost —
// checked in one process, on one monotonic clock, so that no scheduling
// can make it pass or fail by luck.
func testPartitionedLeaderLost(t *testing.T, s *electionSuite) {
	ctx := testCtx(t)
	proxied, stall, resume := s.b.Proxy(t, s.target)
	name := s.prefix + "partition"
	old := campaign(ctx, t, s.b.Open(t, proxied).New(Candidate{Name: name, Identity: "cut-off", TTL: electTTL, Timeout: roomyWait}), "cut-off")
	stall()
	next := campaign(ctx, t, s.candidate("partition", "next", Candidate{TTL: electTTL}), "next")
	if !isLost(old) || !errors.Is(old.Err(), sqlock.ErrLost) {
		t.Fatalf("a candidate won term %d while the cut-off leader of term %d was not lost (Err %v)", next.Token(), old.Token(), old.Err())
	}
	if next.Token() <= old.Token() {
		t.Fatalf("term %d after term %d", next.Token(), old.Token())
	}
	resume()
	if err := old.Resign(ctx); err == nil {
		t.Fatal("the deposed leader's Resign after the partition returned nil")
	}
	resign(t, next)
}
