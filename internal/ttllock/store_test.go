package ttllock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/observe"
)

// The toolkit's acquisition, driven against an in-memory store in a
// synctest bubble: a backend that supplies only grant, renew and release
// gets the input check, the bound, the pauses, the errors, the events and
// the hold.

// testError is a package's error type, as a backend declares it.
type testError struct {
	Op, Name    string
	Kind, Cause error
}

func (e *testError) Error() string   { return ErrorText("test", e.Op, e.Name, e.Kind, e.Cause) }
func (e *testError) Unwrap() []error { return Unwrap(e.Kind, e.Cause) }

var errTestQuorum = errors.New("test: no majority")

var testPkg = Package{
	Name: "test", System: "teststore", Noun: "lock",
	Sentinels: NewSentinels("test", "lock", "name"),
	Error: func(op, name string, kind, cause error) error {
		return &testError{op, name, kind, cause}
	},
	Margin:     func(ttl time.Duration) time.Duration { return ttl / 10 },
	MarginName: "margin",
	RetryMin:   100 * time.Millisecond, RetryMax: time.Second,
	DefaultTimeout: 5 * time.Second,
}

// memStore is one lock table in memory: a name's owner and expiry.
type memStore struct {
	mu       sync.Mutex
	owner    map[string]int
	until    map[string]time.Time
	next     int   // the last owner id
	token    int64 // the last token minted
	grants   int   // attempts
	renewals int
	releases int
	noQuorum bool // attempts are refused with errTestQuorum
}

func newMemStore() *memStore {
	return &memStore{owner: map[string]int{}, until: map[string]time.Time{}}
}

func (s *memStore) Check(name string, ttl time.Duration) (time.Duration, error) {
	switch {
	case name == "":
		return 0, errors.New("empty name")
	case ttl < time.Millisecond:
		return 0, errors.New("short TTL")
	}
	return ttl, nil
}

func (s *memStore) Grant(ctx context.Context, name string, ttl time.Duration, _ bool) (Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grants++
	if s.noQuorum {
		return Grant{Remaining: -1, Refused: Refuse(errTestQuorum, errors.New("1 of 3 answered"))}, nil
	}
	now := time.Now()
	if u, ok := s.until[name]; ok && now.Before(u) {
		return Grant{Remaining: u.Sub(now)}, nil
	}
	s.next++
	s.token++
	s.owner[name], s.until[name] = s.next, now.Add(ttl)
	return Grant{Held: &memHeld{s, name, s.next, ttl}, Token: s.token}, nil
}

type memHeld struct {
	s     *memStore
	name  string
	owner int
	ttl   time.Duration
}

func (h *memHeld) Renew(context.Context) (bool, error) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.renewals++
	if h.s.owner[h.name] != h.owner || !time.Now().Before(h.s.until[h.name]) {
		return true, nil
	}
	h.s.until[h.name] = time.Now().Add(h.ttl)
	return false, nil
}

func (h *memHeld) Release(context.Context) (bool, error) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.releases++
	if h.s.owner[h.name] != h.owner || !time.Now().Before(h.s.until[h.name]) {
		return true, nil
	}
	delete(h.s.until, h.name)
	return false, nil
}

// testLock is a package's lock type, embedding the toolkit's Lock.
type testLock struct{ tl Lock }

func newBase(t *testing.T, cfg Config) *Base {
	t.Helper()
	var b Base
	b.Init(&testPkg, cfg, nil)
	return &b
}

func acquireOn(ctx context.Context, b *Base, s Store, name string, ttl time.Duration, wait bool) (*testLock, error) {
	op := "tryacquire"
	if wait {
		op = "acquire"
	}
	return Acquire(ctx, b, s, Request{Op: op, Name: name, TTL: ttl, Wait: wait}, func() (*testLock, *Lock) {
		l := &testLock{}
		return l, &l.tl
	})
}

// TestAcquireRefusesBadInputBeforeAnythingIsSent: the store's Check
// refuses, the error is the package's Invalid (and sqlock's
// ErrInvalidArgument), no attempt is made and the observer sees nothing.
func TestAcquireRefusesBadInputBeforeAnythingIsSent(t *testing.T) {
	s := newMemStore()
	var rec observetest.Recorder
	cfg := testPkg.NewConfig()
	cfg.AddObserver(&rec)
	b := newBase(t, cfg)
	for _, c := range []struct {
		name string
		ttl  time.Duration
	}{{"", time.Second}, {"n", 0}} {
		l, err := acquireOn(t.Context(), b, s, c.name, c.ttl, true)
		var te *testError
		if l != nil || !errors.Is(err, testPkg.Invalid) || !errors.Is(err, sqlock.ErrInvalidArgument) || !errors.As(err, &te) || te.Op != "acquire" {
			t.Errorf("%q, %v: %v, %v; want the package's Invalid error", c.name, c.ttl, l, err)
		}
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := acquireOn(nil, b, s, "n", time.Second, false); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil context: %v, want ErrNilHandle", err)
	}
	if s.grants != 0 || len(rec.Events()) != 0 {
		t.Fatalf("%d attempts, events %+v; want none", s.grants, rec.Events())
	}
}

// TestAcquireGrantsRenewsAndReleasesThroughTheStore: a grant is a started
// hold with the store's token, renewed every TTL/3 through Held, released
// once (then NotHeld, nothing sent); every event carries Source, System
// and Name.
func TestAcquireGrantsRenewsAndReleasesThroughTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		var rec observetest.Recorder
		cfg := testPkg.NewConfig()
		cfg.AddObserver(&rec)
		b := newBase(t, cfg)
		const ttl = 3 * time.Second
		l, err := acquireOn(t.Context(), b, s, "n", ttl, false)
		if err != nil {
			t.Fatal(err)
		}
		if l.tl.Name() != "n" || l.tl.Token() != 1 {
			t.Fatalf("name %q token %d, want n 1", l.tl.Name(), l.tl.Token())
		}
		ctx, cancel := l.tl.Context(context.Background())
		if tok, ok := sqlock.FencingToken(ctx); !ok || tok != 1 {
			t.Errorf("Context carries token %d, %v; want 1", tok, ok)
		}
		cancel()
		time.Sleep(ttl + ttl/6)
		synctest.Wait()
		if err := l.tl.Err(); err != nil || s.renewals != 3 {
			t.Fatalf("after TTL + TTL/6: %d renewals, Err %v; want 3, nil", s.renewals, err)
		}
		if err := l.tl.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := l.tl.Release(context.Background()); !errors.Is(err, testPkg.NotHeld) || s.releases != 1 {
			t.Fatalf("second Release: %v after %d releases; want NotHeld after 1", err, s.releases)
		}
		evs := rec.Events()
		if len(evs) != 2 || evs[0].Outcome != observe.Acquired || evs[1].Outcome != observe.Released {
			t.Fatalf("events %+v, want acquired then released", evs)
		}
		for _, e := range evs {
			if e.Source != "test" || e.System != "teststore" || e.Name != "n" {
				t.Errorf("event %+v: want Source test, System teststore, Name n", e)
			}
		}
	})
}

// TestAcquireWaitsForTheHoldersExpiry: Acquire of a held name pauses,
// never much past the holder's remaining time, and gets the lock once the
// holder's TTL ran out; a try-once gets NotAcquired at once.
func TestAcquireWaitsForTheHoldersExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		b := newBase(t, testPkg.NewConfig())
		const ttl = time.Second
		first, err := acquireOn(t.Context(), b, s, "n", ttl, false)
		if err != nil {
			t.Fatal(err)
		}
		// The holder stops renewing: the store keeps its row until the TTL.
		s.mu.Lock()
		s.owner["n"] = -1
		s.mu.Unlock()
		if _, err := acquireOn(t.Context(), b, s, "n", ttl, false); !errors.Is(err, testPkg.NotAcquired) || !errors.Is(err, sqlock.ErrNotAcquired) {
			t.Fatalf("try-once on a held name: %v, want NotAcquired", err)
		}
		start := time.Now()
		second, err := acquireOn(t.Context(), b, s, "n", ttl, true)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited > ttl+backoffMax {
			t.Fatalf("waited %v for a holder with at most %v left (pauses of at most %v)", waited, ttl, backoffMax)
		}
		if second.tl.Token() <= first.tl.Token() {
			t.Fatalf("tokens %d then %d, want increasing", first.tl.Token(), second.tl.Token())
		}
		second.tl.Release(context.Background())
		first.tl.Release(context.Background())
	})
}

// TestAcquireTellsItsBoundFromTheCallersDeadline: a wait ended by the
// package's timeout is Timeout and not context.DeadlineExceeded; one ended
// by the caller's earlier deadline is both.
func TestAcquireTellsItsBoundFromTheCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		cfg := testPkg.NewConfig()
		if err := cfg.SetTimeout(time.Minute); err != nil {
			t.Fatal(err)
		}
		b := newBase(t, cfg)
		holder, err := acquireOn(t.Context(), b, s, "n", time.Hour, false)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.tl.Release(context.Background())
		_, err = acquireOn(context.Background(), b, s, "n", time.Hour, true)
		if !errors.Is(err, testPkg.Timeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the package's own bound: %v, want Timeout, not DeadlineExceeded", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = acquireOn(ctx, b, s, "n", time.Hour, true)
		if !errors.Is(err, testPkg.Timeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the caller's deadline: %v, want Timeout and DeadlineExceeded", err)
		}
	})
}

// TestRefusedAttemptsSayWhy: an attempt refused for a reason of the
// store's own (no majority) is that error for a try-once, and joined to
// the cause of a wait that runs out.
func TestRefusedAttemptsSayWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		s.noQuorum = true
		b := newBase(t, testPkg.NewConfig())
		_, err := acquireOn(t.Context(), b, s, "n", time.Second, false)
		if !errors.Is(err, errTestQuorum) || errors.Is(err, testPkg.NotAcquired) {
			t.Fatalf("try-once refused by the store: %v, want its refusal, not NotAcquired", err)
		}
		_, err = acquireOn(t.Context(), b, s, "n", time.Second, true)
		if !errors.Is(err, testPkg.Timeout) || !errors.Is(err, errTestQuorum) || !strings.Contains(err.Error(), "1 of 3 answered") {
			t.Fatalf("a wait refused until its bound: %v, want Timeout joined with the refusal", err)
		}
		if s.grants < 3 {
			t.Fatalf("%d attempts in a 5 s wait", s.grants)
		}
	})
}

// TestObserverPanicOnAcquiredReleasesThroughTheStore: the lock is given
// back through Held before the panic goes on, and never renewed.
func TestObserverPanicOnAcquiredReleasesThroughTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		cfg := testPkg.NewConfig()
		cfg.AddObserver(panicker{})
		b := newBase(t, cfg)
		func() {
			defer func() {
				if r := recover(); r != "observer" {
					t.Errorf("recovered %v", r)
				}
			}()
			acquireOn(t.Context(), b, s, "n", time.Second, false)
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		if s.releases != 1 || s.renewals != 0 {
			t.Fatalf("%d releases, %d renewals; want 1, 0", s.releases, s.renewals)
		}
		l, err := acquireOn(t.Context(), newBase(t, testPkg.NewConfig()), s, "n", time.Second, false)
		if err != nil {
			t.Fatalf("the name after the panic: %v, want it free", err)
		}
		l.tl.Release(context.Background())
	})
}

// TestMaxHoldAndOptionsFromConfig: the Config's setters refuse what is not
// positive (ErrInvalidOption), and a lock of a Base with MaxHold is lost
// at the cap although every renewal is confirmed.
func TestMaxHoldAndOptionsFromConfig(t *testing.T) {
	cfg := testPkg.NewConfig()
	for _, err := range []error{cfg.SetTimeout(0), cfg.SetTimeout(-1), cfg.SetMaxHold(0)} {
		if !errors.Is(err, sqlock.ErrInvalidOption) || !strings.HasPrefix(err.Error(), "test: ") {
			t.Errorf("%v, want a test: error matching ErrInvalidOption", err)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		cfg := testPkg.NewConfig()
		if err := cfg.SetMaxHold(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		l, err := acquireOn(t.Context(), newBase(t, cfg), s, "n", 3*time.Second, false)
		if err != nil {
			t.Fatal(err)
		}
		<-l.tl.Lost()
		if err := l.tl.Err(); !errors.Is(err, testPkg.Lost) || !errors.Is(err, sqlock.ErrLost) || !strings.Contains(err.Error(), "maximum hold") {
			t.Fatalf("Err %v, want Lost for the maximum hold", err)
		}
		if s.renewals == 0 {
			t.Fatal("no renewal before the cap")
		}
		l.tl.Release(context.Background())
	})
}

// TestAcquirerKeepsAFailedAcquisitionsNilLockNil: behind sqlock.Acquirer a
// failed acquisition's typed nil is a nil sqlock.Lock.
func TestAcquirerKeepsAFailedAcquisitionsNilLockNil(t *testing.T) {
	fail := func(context.Context, string, time.Duration) (*Lock, error) { return nil, errors.New("no") }
	a := Acquirer(fail, fail, time.Second)
	if l, err := a.Acquire(t.Context(), "n"); l != nil || err == nil {
		t.Fatalf("Acquire: %v, %v", l, err)
	}
	if l, err := a.TryAcquire(t.Context(), "n"); l != nil || err == nil {
		t.Fatalf("TryAcquire: %v, %v", l, err)
	}
}

// TestWithErrorMakesEveryErrorOfItsBase: a Base initialised with a copy
// from WithError gets its errors from the copy — an acquisition's refusal,
// a release's NotHeld, a lost hold's Lost — with the package's sentinels;
// the package itself is unchanged.
func TestWithErrorMakesEveryErrorOfItsBase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type placed struct{ *testError }
		p := testPkg.WithError(func(op, name string, kind, cause error) error {
			return placed{&testError{op, name, kind, cause}}
		})
		if _, ok := testPkg.Error("x", "", nil, nil).(*testError); p == &testPkg || !ok {
			t.Fatal("WithError changed the package")
		}
		var b Base
		b.Init(p, testPkg.NewConfig(), nil)
		s := newMemStore()
		isPlaced := func(what string, err, kind error) {
			t.Helper()
			if _, ok := err.(placed); !ok || !errors.Is(err, kind) {
				t.Errorf("%s: %T %v; want the copy's error matching %v", what, err, err, kind)
			}
		}
		_, err := acquireOn(t.Context(), &b, s, "", time.Second, false)
		isPlaced("bad input", err, testPkg.Invalid)
		l, err := acquireOn(t.Context(), &b, s, "n", time.Second, false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = acquireOn(t.Context(), &b, s, "n", time.Second, false)
		isPlaced("held", err, testPkg.NotAcquired)
		s.mu.Lock()
		s.owner["n"] = -1 // taken over: the next renewal is refused
		s.mu.Unlock()
		<-l.tl.Lost()
		isPlaced("lost", l.tl.Err(), testPkg.Lost)
		isPlaced("release", l.tl.Release(context.Background()), testPkg.NotHeld)
	})
}

// cutStore fails every attempt as a client that ends its commands at their
// context's deadline does once it has passed: with an i/o timeout of its
// own, while the context may not be marked done yet.
type cutStore struct{ memStore }

var errIOTimeout = errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout")

func (s *cutStore) Grant(ctx context.Context, name string, ttl time.Duration, wait bool) (Grant, error) {
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return Grant{}, errIOTimeout
	}
	return s.memStore.Grant(ctx, name, ttl, wait)
}

// pastDeadline is a context whose deadline has passed and whose timer has
// not yet marked it done — the moment after a socket deadline fired; mark
// marks it done (DeadlineExceeded).
type pastDeadline struct {
	dl   time.Time
	done chan struct{}
}

func (c *pastDeadline) Deadline() (time.Time, bool) { return c.dl, true }
func (c *pastDeadline) Done() <-chan struct{}       { return c.done }
func (c *pastDeadline) Value(any) any               { return nil }
func (c *pastDeadline) mark()                       { close(c.done) }

func (c *pastDeadline) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestAnAttemptCutAtTheDeadlineIsTheWaitsTimeout: an attempt that fails
// after the deadline has passed — a command ended at it by the client,
// before the context's own timer has marked the context done — is the
// wait's end, the package's Timeout matching context.DeadlineExceeded,
// not the client's i/o error (found on a busy machine: redislock's
// AcquireAll answered "i/o timeout" where its wait bound ran out).
func TestAnAttemptCutAtTheDeadlineIsTheWaitsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &cutStore{*newMemStore()}
		b := newBase(t, testPkg.NewConfig())
		ctx := &pastDeadline{time.Now().Add(-time.Millisecond), make(chan struct{})}
		time.AfterFunc(time.Second, ctx.mark) // the context's timer, late
		_, err := acquireOn(ctx, b, s, "n", time.Second, true)
		if !errors.Is(err, testPkg.Timeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errIOTimeout) {
			t.Fatalf("an attempt cut at the deadline: %v, want Timeout matching DeadlineExceeded", err)
		}
	})
}
