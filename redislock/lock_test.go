package redislock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// TestAcquireIsOneAtomicStepWithItsToken: the key holds a 128-bit owner
// with the TTL as its expiry, the fence counter equals the token, a second
// TryAcquire is refused with ErrNotAcquired (sqlock's too) without waiting
// (the Locker's wait bound is an hour: go test -timeout would catch a
// wait), and each new holder's token is greater.
func TestAcquireIsOneAtomicStepWithItsToken(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{})
	c := s.Client(t, nil)
	lk := redislock.New(c, redislock.WithTimeout(time.Hour))
	ctx := context.Background()
	var last int64
	for range 3 {
		l := must[*redislock.Lock](t)(lk.Acquire(ctx, "k", time.Minute))
		owner := must[string](t)(c.Get(ctx, "k").Result())
		pttl := must[time.Duration](t)(c.PTTL(ctx, "k").Result())
		fence := must[int64](t)(c.Get(ctx, redislock.FenceKey("k")).Int64())
		if len(owner) != 32 || pttl <= 0 || pttl > time.Minute || fence != l.Token() || l.Token() <= last {
			t.Fatalf("owner %q pttl %v fence %d token %d (last %d)", owner, pttl, fence, l.Token(), last)
		}
		last = l.Token()
		_, err := lk.TryAcquire(ctx, "k", time.Minute)
		if !errors.Is(err, redislock.ErrNotAcquired) || !errors.Is(err, sqlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held lock: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := must[int64](t)(c.Exists(ctx, "k").Result()); n != 0 {
			t.Fatal("the key survived Release")
		}
		if err := l.Release(ctx); !errors.Is(err, redislock.ErrNotHeld) {
			t.Fatalf("second Release: %v, want ErrNotHeld", err)
		}
	}
}

// TestAcquireWaitsForTheHolder: Acquire waits while the lock is held and
// gets it only after the holder released it (order, not time: the waiter's
// own bound is an hour, so go test -timeout bounds the wait); with the lock
// never released it runs out with ErrTimeout, not before its bound (a
// lower bound a slow machine cannot break: it shows the call waited).
func TestAcquireWaitsForTheHolder(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{})
	c := s.Client(t, nil)
	ctx := context.Background()
	l := must[*redislock.Lock](t)(redislock.New(c).Acquire(ctx, "k", time.Minute))
	released := make(chan struct{})
	go func() {
		time.Sleep(50 * time.Millisecond) // the holder's work: lets the waiter start waiting
		close(released)
		l.Release(ctx)
	}()
	l2 := must[*redislock.Lock](t)(redislock.New(c, redislock.WithTimeout(time.Hour)).Acquire(ctx, "k", time.Minute))
	select {
	case <-released:
	default:
		t.Fatal("acquired before the holder released")
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d ≤ %d", l2.Token(), l.Token())
	}
	const bound = 200 * time.Millisecond
	start := time.Now()
	_, err := redislock.New(c, redislock.WithTimeout(bound)).Acquire(ctx, "k", time.Minute)
	if !errors.Is(err, redislock.ErrTimeout) || !errors.Is(err, sqlock.ErrTimeout) || time.Since(start) < bound {
		t.Fatalf("Acquire of a held lock: %v after %v", err, time.Since(start))
	}
	l2.Release(ctx)
}

// TestLostWhenTheKeyIsTakenOver: a holder whose key was deleted and taken
// by someone else learns it at its next renewal: Lost fires, Err and the
// Context's cause match ErrLost, and Release changes nothing (ErrNotHeld).
// The test waits for Lost itself (go test -timeout bounds it); when it
// fires relative to the TTL is internal/ttllock's synctest
// TestRefusedRenewalIsLostAtOnce.
func TestLostWhenTheKeyIsTakenOver(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{})
	c := s.Client(t, nil)
	lk := redislock.New(c)
	ctx := context.Background()
	// Any TTL: Lost is the point, by the refused renewal at TTL/3 or, on a
	// machine too slow to send it, by the trust window's end.
	l := must[*redislock.Lock](t)(lk.Acquire(ctx, "k", time.Second))
	lctx, cancel := l.Context(ctx)
	defer cancel()
	if err := c.Set(ctx, "k", "someone else", 0).Err(); err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	<-lctx.Done()
	if !errors.Is(l.Err(), redislock.ErrLost) || !errors.Is(context.Cause(lctx), sqlock.ErrLost) {
		t.Fatalf("Err %v, cause %v", l.Err(), context.Cause(lctx))
	}
	if err := l.Release(ctx); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("Release: %v", err)
	}
	if v := must[string](t)(c.Get(ctx, "k").Result()); v != "someone else" {
		t.Fatalf("Release changed the new holder's key: %q", v)
	}
}

// TestRenewalSurvivesTransientErrors: every renewal of a held lock meets
// three faults in a row, injected by a client hook on the renewal's own
// commands — the connections are killed on the server as the command goes
// out, the command fails before it is sent, and the server extends the
// key but its reply is replaced by an error — and is retried until one
// attempt goes through. After six renewals so faulted the lock was never
// lost, every fault was met in order, and the key is still the holder's:
// Release deletes it. Nothing is paced by the clock: the faults follow
// the renewals, whatever the machine's speed.
func TestRenewalSurvivesTransientErrors(t *testing.T) {
	leakCheck(t)
	s := redistest.New(t, redistest.Options{})
	ctx := context.Background()
	admin := s.Client(t, nil)
	faults := &renewalFaults{admin: admin, renewed: make(chan int, 100)}
	c := s.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1 // every failure reaches the renewal
	})
	if err := redislock.LoadScripts(ctx, c); err != nil {
		t.Fatal(err) // each renewal is then one EVALSHA the hook can tell
	}
	c.AddHook(faults)
	const renewals = 6
	l := must[*redislock.Lock](t)(redislock.New(c).Acquire(ctx, "k", 3*time.Second))
	for range renewals {
		select {
		case <-faults.renewed:
		case <-l.Lost():
			t.Fatalf("lost after %d faulted renewals: %v", faults.count(), l.Err())
		}
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lost: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after faulted renewals: %v", err)
	}
	if n := must[int64](t)(admin.Exists(ctx, "k").Result()); n != 0 {
		t.Fatal("the key outlived Release")
	}
	got := faults.log()
	for i := range renewals {
		want := []string{"killed", "unsent", "reply lost", "renewed"}
		if len(got) < 4*(i+1) || !slices.Equal(got[4*i:4*i+4], want) {
			t.Fatalf("renewal %d met %v, want %v (all: %v)", i+1, got[min(4*i, len(got)):], want, got)
		}
	}
}

// renewalFaults is a client hook that fails each renewal's first three
// attempts, one fault of each kind, and lets the fourth through.
type renewalFaults struct {
	admin   *redis.Client
	renewed chan int // one send per renewal that went through
	mu      sync.Mutex
	attempt int // of the current renewal
	events  []string
}

var errInjected = errors.New("injected fault")

func (f *renewalFaults) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *renewalFaults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f *renewalFaults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isRenewal(cmd) {
			return next(ctx, cmd)
		}
		f.mu.Lock()
		f.attempt++
		attempt := f.attempt
		f.mu.Unlock()
		var err error
		switch attempt {
		case 1: // the server drops the client's connections
			f.admin.ClientKillByFilter(context.Background(), "TYPE", "normal", "SKIPME", "yes")
			if err = next(ctx, cmd); err == nil {
				err = errInjected // the pool had dialled afresh: fail it anyway
			}
			f.note("killed")
		case 2: // fails before it is sent
			err = errInjected
			f.note("unsent")
		case 3: // the server extends the key; the reply is lost
			if err = next(ctx, cmd); err == nil {
				err = errInjected
			}
			f.note("reply lost")
		default:
			if err = next(ctx, cmd); err == nil {
				f.mu.Lock()
				f.attempt = 0
				f.mu.Unlock()
				f.note("renewed")
				f.renewed <- 1
			}
		}
		if err != nil {
			cmd.SetErr(err)
		}
		return err
	}
}

func (f *renewalFaults) note(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

func (f *renewalFaults) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *renewalFaults) count() int { return len(f.log()) }

// isRenewal reports whether cmd is the renewal script's EVALSHA.
func isRenewal(cmd redis.Cmder) bool {
	args := cmd.Args()
	return len(args) > 1 && strings.EqualFold(cmd.Name(), "evalsha") && args[1] == redislock.RenewScript()
}

// TestContextCarriesTheFencingToken: a Lock's Context carries its token
// (sqlock.FencingToken); a RedlockLock's carries none.
func TestContextCarriesTheFencingToken(t *testing.T) {
	leakCheck(t)
	servers := redistest.NewN(t, 3, redistest.Options{})
	ctx := context.Background()
	l := must[*redislock.Lock](t)(redislock.New(servers[0].Client(t, nil)).Acquire(ctx, "k", time.Second))
	defer l.Release(ctx)
	lctx, cancel := l.Context(ctx)
	defer cancel()
	if tok, ok := sqlock.FencingToken(lctx); !ok || tok != l.Token() {
		t.Fatalf("token in context %d %t, lock's %d", tok, ok, l.Token())
	}
	rl := must[*redislock.RedlockLock](t)(redislock.NewRedlock(clients(t, servers)).Acquire(ctx, "r", time.Second))
	defer rl.Release(ctx)
	rctx, rcancel := rl.Context(ctx)
	defer rcancel()
	if _, ok := sqlock.FencingToken(rctx); ok {
		t.Fatal("a Redlock lock's context carries a fencing token")
	}
}

// TestAcquirersAdaptEachBackend: Acquirer(ttl) serves sqlock.Acquirer; a
// single server's locks are sqlock.Fenced, Redlock's are not.
func TestAcquirersAdaptEachBackend(t *testing.T) {
	leakCheck(t)
	servers := redistest.NewN(t, 3, redistest.Options{})
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		a      sqlock.Acquirer
		fenced bool
	}{
		{"single", redislock.New(servers[0].Client(t, nil)).Acquirer(time.Second), true},
		{"redlock", redislock.NewRedlock(clients(t, servers)).Acquirer(time.Second), false},
	} {
		l, err := c.a.Acquire(ctx, c.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := l.(sqlock.Fenced); ok != c.fenced {
			t.Errorf("%s: Fenced %t", c.name, ok)
		}
		if l2, err := c.a.TryAcquire(ctx, c.name); l2 != nil || !errors.Is(err, sqlock.ErrNotAcquired) {
			t.Errorf("%s: TryAcquire of a held lock: %v, %v", c.name, l2, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
		if l, err := c.a.TryAcquire(ctx, ""); l != nil || !errors.Is(err, redislock.ErrInvalid) {
			t.Errorf("%s: empty key: %v", c.name, err)
		}
	}
}

// TestWithMaxHoldEndsTheTrustAtItsCap: with WithMaxHold, a Locker's and a
// Redlock's lock of a one-minute TTL is lost at the cap, long before any
// expiry could, its Err matching ErrLost (and sqlock's) and naming the
// maximum hold; the key is still the holder's, so Release deletes it. A
// cap that is not positive is ErrInvalidOption.
func TestWithMaxHoldEndsTheTrustAtItsCap(t *testing.T) {
	leakCheck(t)
	servers := redistest.NewN(t, 3, redistest.Options{})
	ctx := context.Background()
	capped := redislock.WithMaxHold(200 * time.Millisecond)
	lk := redislock.New(servers[0].Client(t, nil), capped)
	rl := redislock.NewRedlock(clients(t, servers), capped)
	for name, acquire := range map[string]func() (sqlock.Lock, error){
		"Locker":  func() (sqlock.Lock, error) { return lk.Acquire(ctx, "capped", time.Minute) },
		"Redlock": func() (sqlock.Lock, error) { return rl.Acquire(ctx, "capped-r", time.Minute) },
	} {
		l := must[sqlock.Lock](t)(acquire())
		<-l.Lost()
		if err := l.Err(); !errors.Is(err, redislock.ErrLost) || !errors.Is(err, sqlock.ErrLost) || !strings.Contains(err.Error(), "maximum hold") {
			t.Errorf("%s: Err %v, want ErrLost for the maximum hold", name, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: Release of a capped lock whose key is still its own: %v", name, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := redislock.New(servers[0].Client(t, nil), redislock.WithMaxHold(d)).TryAcquire(ctx, "k", time.Second); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Errorf("WithMaxHold(%v): %v, want ErrInvalidOption", d, err)
		}
	}
}
