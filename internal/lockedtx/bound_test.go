package lockedtx

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
)

// fakeServer is a PostgreSQL as a deadline-bound lock wait sees it, in
// memory, for tests inside a synctest bubble (where time is exact): every
// statement costs one round trip, rtt (half each way), and the lock
// statement waits, on the server, for the lock to be released or for its
// lock_timeout, then answers 55P03. Each pgx handle of it (Begin) runs the
// generic BeginFunc path: BEGIN alone, measured, then the lock statements.
type fakeServer struct {
	rtt time.Duration

	mu       sync.Mutex
	released chan struct{} // closed when the holder lets go; nil: never
	locks    []string      // the lock statements received
	commits  int
}

// sent and committed are the lock statements received and the COMMITs.
func (s *fakeServer) sent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.locks)
}

func (s *fakeServer) committed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}

// settle lets the bubble's round trips run until every goroutine waits for
// something other than the clock (a lock, a gate): a second of fake time,
// then synctest.Wait.
func settle() {
	time.Sleep(time.Second)
	synctest.Wait()
}

func (s *fakeServer) BeginTx(ctx context.Context, _ pgx.TxOptions) (pgx.Tx, error) {
	if err := s.trip(ctx, s.rtt); err != nil {
		return nil, err
	}
	return &fakeTx{s: s}, nil
}

// trip spends d of the network, or returns ctx's error when ctx ends first.
func (s *fakeServer) trip(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var lockTimeoutRE = regexp.MustCompile(`lock_timeout = '(\d+)ms'`)

// lock serves the lock statements: one way there, the wait, one way back.
func (s *fakeServer) lock(ctx context.Context, sql string) error {
	s.mu.Lock()
	s.locks = append(s.locks, sql)
	released := s.released
	s.mu.Unlock()
	m := lockTimeoutRE.FindStringSubmatch(sql)
	if m == nil {
		return errors.New("fake: no lock_timeout in " + sql)
	}
	ms, _ := strconv.Atoi(m[1])
	if err := s.trip(ctx, s.rtt/2); err != nil {
		return err
	}
	timeout := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer timeout.Stop()
	var answer error
	select {
	case <-ctx.Done():
		return ctx.Err() // the client cut the statement
	case <-released:
	case <-timeout.C:
		answer = &pgconn.PgError{Severity: "ERROR", Code: "55P03", Message: "canceling statement due to lock timeout"}
	}
	if err := s.trip(ctx, s.rtt/2); err != nil {
		return err
	}
	return answer
}

type fakeTx struct {
	pgx.Tx // only the methods below are called
	s      *fakeServer
}

func (t *fakeTx) Exec(ctx context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, t.s.lock(ctx, sql)
}

func (t *fakeTx) Commit(ctx context.Context) error {
	if err := t.s.trip(ctx, t.s.rtt); err != nil {
		return err
	}
	t.s.mu.Lock()
	t.s.commits++
	t.s.mu.Unlock()
	return nil
}

func (t *fakeTx) Rollback(ctx context.Context) error { return t.s.trip(ctx, t.s.rtt) }

// runFake runs one locked transaction on s with the caller's deadline
// deadline away, fn taking hold, and returns its error and when it
// returned (from the call).
func runFake(t *testing.T, s *fakeServer, deadline, hold time.Duration, opts ...option) (time.Duration, *observetest.Recorder, error) {
	t.Helper()
	var evs observetest.Recorder
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	opts = append([]option{withTimeout(time.Hour), func(c *Config) { c.Observer = &evs }}, opts...)
	err := Run(ctx, s, advisory.KeyOf("bound"), PgxBegin(s), func(context.Context, pgx.Tx) error {
		time.Sleep(hold)
		return nil
	}, opts)
	return time.Since(start), &evs, err
}

// A wait the caller's deadline bounds ends on the server, before the
// deadline: over a network of 100 ms round trips with the lock held
// throughout and a 3 s deadline, BEGIN (measured: 100 ms) leaves 2.9 s, of
// which 3.5 round trips are kept back (no hold seen yet: the hold counts as
// one round trip) — lock_timeout 2,550 ms — the 55P03 arrives at 2.75 s
// and the call returns after its ROLLBACK, at 2.85 s, before the deadline
// cut anything: the typed timeout, matching
// context.DeadlineExceeded, one Timeout event, not retried even under
// RetryLockTimeout, nothing committed.
func TestDeadlineBoundWaitAnswersBeforeTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt, deadline = 100 * time.Millisecond, 3 * time.Second
		s := &fakeServer{rtt: rtt}
		took, evs, err := runFake(t, s, deadline, 0, func(c *Config) { c.RetryOpts = []retry.Option{retry.RetryLockTimeout()} })
		var le *LockError
		if !errors.As(err, &le) || !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) ||
			!le.ByDeadline || retry.SQLState(err) != "55P03" {
			t.Fatalf("got %v, want the server's 55P03 as the typed timeout of the deadline", err)
		}
		const bound = deadline - rtt - 7*rtt/2
		if answered := rtt + bound + rtt + rtt; le.Timeout != bound || took != answered {
			t.Fatalf("bound %v, returned at %v; want %v, returned at %v", le.Timeout, took, bound, answered)
		}
		if len(s.locks) != 1 || s.commits != 0 {
			t.Fatalf("%d lock statements, %d commits: want 1 and 0", len(s.locks), s.commits)
		}
		if evs.Count(observe.LockAcquire, observe.Timeout) != 1 || evs.Count(observe.Retry, observe.OutcomeNone) != 0 {
			t.Fatalf("events: %+v", evs.Events())
		}
	})
}

// A waiter granted at the last moment of its bound still has the time it
// kept back for its transaction: fn and COMMIT end before the deadline.
func TestGrantAtTheEndOfTheBoundLeavesTimeToCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt, deadline = 100 * time.Millisecond, 3 * time.Second
		const bound = deadline - rtt - 7*rtt/2
		s := &fakeServer{rtt: rtt, released: make(chan struct{})}
		// The holder lets go 1 ms before the wait would time out: BEGIN's
		// round trip, half a round trip to the server, the bound less 1 ms.
		time.AfterFunc(rtt+rtt/2+bound-time.Millisecond, func() { close(s.released) })
		took, _, err := runFake(t, s, deadline, rtt/2)
		if err != nil {
			t.Fatalf("granted at the end of the bound: %v", err)
		}
		if took >= deadline || s.commits != 1 {
			t.Fatalf("committed %d times, returned at %v: want once, before the %v deadline", s.commits, took, deadline)
		}
	})
}

// When BEGIN's round trip alone passes the deadline, no lock statement is
// sent: the typed timeout of the deadline with no server error, one
// Timeout event, the transaction rolled back, fn not run.
func TestNoTimeLeftSendsNoLockStatement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeServer{rtt: 100 * time.Millisecond}
		_, evs, err := runFake(t, s, 50*time.Millisecond, 0)
		var le *LockError
		if !errors.As(err, &le) || !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || le.Err != nil {
			t.Fatalf("got %v, want the typed timeout with nothing from the server", err)
		}
		if len(s.locks) != 0 || s.commits != 0 || evs.Count(observe.LockAcquire, observe.Timeout) != 1 {
			t.Fatalf("%d lock statements, %d commits, events %+v: want none, none, one Timeout", len(s.locks), s.commits, evs.Events())
		}
	})
}

// A cancellation ends a wait the deadline bounds at once: the call returns
// context.Canceled one ROLLBACK after the cancellation, long before the
// bound would have run out.
func TestCancelEndsDeadlineBoundWaitAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt = 100 * time.Millisecond
		s := &fakeServer{rtt: rtt}
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		const at = 10 * time.Second
		time.AfterFunc(at, cancel)
		start := time.Now()
		err := Run(ctx, s, advisory.KeyOf("bound"), PgxBegin(s), func(context.Context, pgx.Tx) error { return nil },
			[]option{withTimeout(2 * time.Hour)})
		if !errors.Is(err, context.Canceled) || time.Since(start) != at+rtt {
			t.Fatalf("got %v at %v, want context.Canceled at %v", err, time.Since(start), at+rtt)
		}
	})
}

// The estimates a deadline-bound wait keeps back are fed from the clock
// exactly as the transaction ran: BEGIN sent alone gives a round trip, and
// each release the hold (grant to end of COMMIT) and COMMIT's round trip.
// A 2 ms round trip and 32 ms holds keep 1.5 × 32 + 2 × 2 = 52 ms back once
// two holds were seen; a 320 ms hold then replaces the hold estimate (the
// reserve 484 ms), and the 32 ms holds after it bring it down by a sixteenth
// of the difference each: to 302 ms (457 ms kept back), then 285.125 ms
// (431.6875 ms).
func TestEstimatesFollowTheTransactionsTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		a := &Attempt{plan: &plan{}, ctx: ctx}
		sent := time.Now()
		time.Sleep(2 * time.Millisecond)
		a.begunAlone(sent)
		hold := func(d time.Duration) {
			locked := time.Now()
			time.Sleep(d - 2*time.Millisecond) // fn
			sent := time.Now()
			time.Sleep(2 * time.Millisecond) // COMMIT's round trip
			a.released(locked, sent)
		}
		hold(32 * time.Millisecond)
		hold(32 * time.Millisecond)
		for i, want := range []time.Duration{52 * time.Millisecond, 484 * time.Millisecond, 457 * time.Millisecond, 4316875 * time.Microsecond / 10} {
			if i == 1 {
				hold(320 * time.Millisecond)
			} else if i > 1 {
				hold(32 * time.Millisecond)
			}
			if got := a.est.Reserve(time.Hour); got != want {
				t.Fatalf("step %d: reserve %v, want %v", i, got, want)
			}
		}
	})
}

// conflict is a lost optimistic write, as package retry classifies one.
type conflict struct{}

func (conflict) Error() string      { return "stale" }
func (conflict) RetryCause() string { return "stale" }

// runOptimistic runs a DoOptimistic-shaped call on s: unlocked is the
// lock-free first attempt, the locked attempts commit at once.
func runOptimistic(ctx context.Context, s *fakeServer, hot *HotKeys, unlocked func(context.Context) error) error {
	return Run(ctx, s, advisory.KeyOf("hot"), PgxBegin(s), func(context.Context, pgx.Tx) error { return nil },
		[]option{withTimeout(time.Hour), func(c *Config) { c.Unlocked, c.Hot = unlocked, hot }})
}

// HotKeys, exactly (settle is the instant every call is blocked):
// while one call's locked attempt waits for the key's lock, a new call
// sharing the HotKeys skips its lock-free attempt and queues for the lock
// too; once both are done, a new call is lock-free again.
func TestHotKeysQueueNewCallsWhileOneIsLocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeServer{rtt: time.Millisecond, released: make(chan struct{})}
		var hot HotKeys
		ctx := t.Context()
		done := make(chan error, 2)
		go func() { done <- runOptimistic(ctx, s, &hot, func(context.Context) error { return conflict{} }) }()
		settle()
		if s.sent() != 1 {
			t.Fatalf("%d lock statements after the conflict, want 1 (the retry waiting)", s.sent())
		}
		lockFree := false
		go func() {
			done <- runOptimistic(ctx, s, &hot, func(context.Context) error { lockFree = true; return nil })
		}()
		settle()
		if lockFree || s.sent() != 2 {
			t.Fatalf("with one queued: lock-free attempt ran %v, %d lock statements; want none and 2", lockFree, s.sent())
		}
		close(s.released)
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if err := runOptimistic(ctx, s, &hot, func(context.Context) error { lockFree = true; return nil }); err != nil || !lockFree || s.sent() != 2 {
			t.Fatalf("queue drained: %v, lock-free %v, %d lock statements; want a lock-free attempt and no lock", err, lockFree, s.sent())
		}
	})
}

// Of a crowd that starts on a cold key at once, hotBurst first attempts run
// lock-free together and the others take the lock at once.
func TestHotKeysLetFourOfACrowdRunLockFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeServer{rtt: time.Millisecond, released: make(chan struct{})}
		close(s.released) // the key is free
		var hot HotKeys
		gate := make(chan struct{})
		var mu sync.Mutex
		lockFree := 0
		const calls = 7
		done := make(chan error, calls)
		for range calls {
			go func() {
				done <- runOptimistic(t.Context(), s, &hot, func(context.Context) error {
					mu.Lock()
					lockFree++
					mu.Unlock()
					<-gate
					return nil
				})
			}()
		}
		settle()
		if lockFree != hotBurst || s.committed() != calls-hotBurst {
			t.Fatalf("%d lock-free at once and %d locked commits, want %d and %d", lockFree, s.committed(), hotBurst, calls-hotBurst)
		}
		close(gate)
		for range calls {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}
