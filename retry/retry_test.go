package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/observe"
)

type causeErr string

func (c causeErr) Error() string      { return "conflict: " + string(c) }
func (c causeErr) RetryCause() string { return string(c) }

type stateErr string

func (s stateErr) Error() string    { return "sqlstate " + string(s) }
func (s stateErr) SQLState() string { return string(s) }

// noSleep records waits instead of sleeping.
func noSleep(waits *[]time.Duration) Option {
	return option(func(p *Policy) {
		p.sleep = func(ctx context.Context, d time.Duration) error {
			*waits = append(*waits, d)
			return ctx.Err()
		}
	})
}

func failing(n int, err error) (func(context.Context) error, *int) {
	calls := 0
	return func(context.Context) error {
		calls++
		if calls <= n {
			return err
		}
		return nil
	}, &calls
}

func TestSucceedsAfterRetries(t *testing.T) {
	var waits []time.Duration
	fn, calls := failing(3, causeErr("stale"))
	if err := Do(context.Background(), fn, noSleep(&waits)); err != nil {
		t.Fatal(err)
	}
	if *calls != 4 || len(waits) != 3 {
		t.Fatalf("calls %d waits %d, want 4 and 3", *calls, len(waits))
	}
}

func TestAttemptLimit(t *testing.T) {
	var waits []time.Duration
	stale := causeErr("stale")
	fn, calls := failing(100, stale)
	err := Do(context.Background(), fn, WithMaxAttempts(4), noSleep(&waits))
	var ex *ExhaustedError
	if !errors.As(err, &ex) || ex.Attempts != 4 || ex.Reason != ReasonAttempts || ex.Cause != "stale" {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(err, ErrExhausted) || !errors.Is(err, stale) {
		t.Fatal("exhausted error must match ErrExhausted and the last error")
	}
	if *calls != 4 || len(waits) != 3 {
		t.Fatalf("calls %d waits %d", *calls, len(waits))
	}
	fn, calls = failing(100, stale)
	Do(context.Background(), fn, WithMaxAttempts(1), noSleep(&waits))
	if *calls != 1 {
		t.Fatalf("WithMaxAttempts(1) must run once, ran %d", *calls)
	}
}

// WithMaxElapsed refuses the wait that would end past the limit, and allows
// one that ends on it: with 10 ms waits, a 50 ms limit has attempts at 0,
// 10, …, 50 ms (six), a 49 ms limit stops after the fifth, at 40 ms. Inside
// the bubble the clock is exact, so these are counts and instants, not
// windows.
func TestElapsedLimit(t *testing.T) {
	for _, tc := range []struct {
		limit    time.Duration
		attempts int
	}{{50 * time.Millisecond, 6}, {49 * time.Millisecond, 5}, {55 * time.Millisecond, 6}} {
		t.Run(tc.limit.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var at []time.Duration
				err := Do(t.Context(), func(context.Context) error {
					at = append(at, time.Since(start))
					return causeErr("stale")
				}, WithMaxAttempts(1000), WithBackoff(Constant(10*time.Millisecond)), WithMaxElapsed(tc.limit))
				var ex *ExhaustedError
				if !errors.As(err, &ex) || ex.Reason != ReasonElapsed || ex.Attempts != tc.attempts {
					t.Fatalf("got %v, want ReasonElapsed after %d attempts", err, tc.attempts)
				}
				for i, d := range at {
					if want := time.Duration(i) * 10 * time.Millisecond; d != want {
						t.Fatalf("attempts at %v, want every 10ms from 0", at)
					}
				}
				if len(at) != tc.attempts || time.Since(start) != at[len(at)-1] {
					t.Fatalf("%d attempts at %v, returned at %v: want %d, returning at the last", len(at), at, time.Since(start), tc.attempts)
				}
			})
		})
	}
}

func TestExponentialJitterBounds(t *testing.T) {
	b := Exponential(time.Millisecond, 50*time.Millisecond)
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 70; n++ {
		ceiling := min(time.Millisecond<<min(n-1, 40), 50*time.Millisecond)
		lo, hi := ceiling, time.Duration(0)
		for i := 0; i < 2000; i++ {
			d := b.Delay(n, r)
			if d < 0 || d > ceiling {
				t.Fatalf("attempt %d: delay %v outside [0, %v]", n, d, ceiling)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// Full jitter uses the whole range.
		if lo > ceiling/10 || hi < ceiling*9/10 {
			t.Fatalf("attempt %d: delays span [%v, %v] of [0, %v]", n, lo, hi, ceiling)
		}
	}
	// The same seed gives the same sequence.
	r1, r2 := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for n := 1; n < 20; n++ {
		if b.Delay(n, r1) != b.Delay(n, r2) {
			t.Fatal("seeded jitter is not reproducible")
		}
	}
	if d := Exponential(time.Second, time.Millisecond).Delay(1, r); d > time.Second {
		t.Fatalf("max below base is raised to base: %v", d)
	}
}

func TestSeededRandGivesSameWaits(t *testing.T) {
	run := func() []time.Duration {
		var waits []time.Duration
		fn, _ := failing(5, causeErr("stale"))
		Do(context.Background(), fn, WithRand(rand.New(rand.NewPCG(3, 4))), noSleep(&waits))
		return waits
	}
	a, b := run(), run()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("%v != %v", a, b)
	}
}

func TestConstant(t *testing.T) {
	var waits []time.Duration
	fn, _ := failing(3, causeErr("stale"))
	Do(context.Background(), fn, WithBackoff(Constant(7*time.Millisecond)), noSleep(&waits))
	for _, w := range waits {
		if w != 7*time.Millisecond {
			t.Fatalf("waits %v", waits)
		}
	}
}

// A cancellation during a backoff wait ends the wait at that instant, with
// ReasonContext and both errors, and fn does not run again.
func TestCancelledMidSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		calls := 0
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			done <- Do(ctx, func(context.Context) error {
				calls++
				return causeErr("stale")
			}, WithBackoff(Constant(time.Hour)))
		}()
		time.Sleep(time.Hour - time.Nanosecond)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("returned before the hour's wait ended or the context did: %v", err)
		default:
		}
		cancel()
		err := <-done
		if waited := time.Since(start); waited != time.Hour-time.Nanosecond {
			t.Fatalf("returned %v after the start, want at the cancellation", waited)
		}
		var ex *ExhaustedError
		if !errors.As(err, &ex) || ex.Reason != ReasonContext {
			t.Fatalf("got %v", err)
		}
		if !errors.Is(err, context.Canceled) || !errors.Is(err, causeErr("stale")) {
			t.Fatal("must wrap both the context error and the last error")
		}
		if calls != 1 {
			t.Fatalf("fn ran %d times after cancellation", calls)
		}
	})
}

func TestNeverRetried(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	plain := errors.New("boom")
	for name, tc := range map[string]struct {
		ctx context.Context
		err error
	}{
		"plain":             {ctx, plain},
		"unique violation":  {ctx, stateErr("23505")},
		"lock timeout":      {ctx, stateErr("55P03")},
		"statement timeout": {ctx, stateErr("57014")},
		"ctx canceled":      {ctx, fmt.Errorf("query: %w", context.Canceled)},
		"deadline":          {ctx, context.DeadlineExceeded},
		"stopped stale":     {ctx, Stop(causeErr("stale"))},
		"stopped 40001":     {ctx, fmt.Errorf("commit: %w", Stop(stateErr("40001")))},
		"cancelled ctx":     {cancelled, causeErr("stale")},
	} {
		t.Run(name, func(t *testing.T) {
			calls := 0
			err := Do(tc.ctx, func(context.Context) error { calls++; return tc.err }, RetryIf(func(error) (bool, string) {
				return name == "stopped stale" || name == "cancelled ctx", "forced"
			}))
			if calls != 1 {
				t.Fatalf("ran %d times", calls)
			}
			if err != tc.err {
				t.Fatalf("error must be returned unchanged: %v", err)
			}
		})
	}
}

func TestClassification(t *testing.T) {
	for _, tc := range []struct {
		err   error
		retry bool
		cause string
	}{
		{causeErr("stale"), true, "stale"},
		{fmt.Errorf("wrapped: %w", causeErr("stale")), true, "stale"},
		{causeErr(""), false, ""},
		{stateErr("40001"), true, "40001"},
		{fmt.Errorf("tx: %w", stateErr("40P01")), true, "40P01"},
		{stateErr("55P03"), false, ""},
		{errors.New("x"), false, ""},
		{nil, false, ""},
	} {
		if ok, cause := Default(tc.err); ok != tc.retry || cause != tc.cause {
			t.Errorf("Default(%v) = %v %q", tc.err, ok, cause)
		}
	}
}

func TestRetryLockTimeoutAndPredicates(t *testing.T) {
	var waits []time.Duration
	fn, calls := failing(2, stateErr("55P03"))
	if err := Do(context.Background(), fn, RetryLockTimeout(), noSleep(&waits)); err != nil || *calls != 3 {
		t.Fatalf("55P03 with RetryLockTimeout: %v after %d calls", err, *calls)
	}
	special := errors.New("special")
	fn, calls = failing(2, special)
	if err := Do(context.Background(), fn, noSleep(&waits),
		RetryIf(func(err error) (bool, string) { return errors.Is(err, special), "special" })); err != nil || *calls != 3 {
		t.Fatalf("RetryIf: %v after %d calls", err, *calls)
	}
	// WithClassifier replaces the default: stale is no longer retried.
	fn, calls = failing(2, causeErr("stale"))
	err := Do(context.Background(), fn, noSleep(&waits),
		WithClassifier(func(error) (bool, string) { return false, "" }))
	if *calls != 1 || !errors.Is(err, causeErr("stale")) {
		t.Fatalf("WithClassifier: %v after %d calls", err, *calls)
	}
}

func TestObserverSeesEachRetry(t *testing.T) {
	var waits []time.Duration
	rec := &observetest.Recorder{}
	fn, _ := failing(2, stateErr("40001"))
	Do(context.Background(), fn, WithObserver(rec), noSleep(&waits))
	events := rec.Events()
	if len(events) != 2 {
		t.Fatalf("events %v", events)
	}
	for i, e := range events {
		if e.Kind != observe.Retry || e.Attempt != i+1 || e.Cause != "40001" || e.Wait != waits[i] {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
}

func TestWrapAndDoValue(t *testing.T) {
	var waits []time.Duration
	calls := 0
	get := Wrap(func(_ context.Context, id int) (string, error) {
		calls++
		if calls < 3 {
			return "partial", causeErr("stale")
		}
		return fmt.Sprint("order-", id), nil
	}, noSleep(&waits))
	got, err := get(context.Background(), 7)
	if err != nil || got != "order-7" || calls != 3 {
		t.Fatalf("Wrap: %q %v after %d calls", got, err, calls)
	}
	v, err := DoValue(context.Background(), func(context.Context) (int, error) { return 42, errors.New("no") })
	if err == nil || v != 0 {
		t.Fatalf("DoValue on failure must return the zero value: %d %v", v, err)
	}
	n := 0
	pay := WrapErr(func(_ context.Context, amount int) error {
		n++
		if n == 1 {
			return stateErr("40P01")
		}
		return nil
	}, noSleep(&waits))
	if err := pay(context.Background(), 10); err != nil || n != 2 {
		t.Fatalf("WrapErr: %v after %d", err, n)
	}
}

func TestPolicyIsReusableConcurrently(t *testing.T) {
	p := New(WithBackoff(Constant(0)), WithMaxAttempts(50))
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn, calls := failing(5, causeErr("stale"))
			if err := p.Do(context.Background(), fn); err != nil || *calls != 6 {
				t.Errorf("%v after %d calls", err, *calls)
			}
		}()
	}
	wg.Wait()
}

func TestFirstAttemptSuccessAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	opts := []Option{WithMaxAttempts(3), WithBackoff(Constant(time.Millisecond))}
	if n := testing.AllocsPerRun(1000, func() { _ = Do(ctx, ok) }); n != 0 {
		t.Fatalf("Do: %v allocs", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = Do(ctx, ok, opts...) }); n != 0 {
		t.Fatalf("Do with options: %v allocs", n)
	}
	p := New(opts...)
	if n := testing.AllocsPerRun(1000, func() { _ = p.Do(ctx, ok) }); n != 0 {
		t.Fatalf("Policy.Do: %v allocs", n)
	}
	okv := func(context.Context) (int, error) { return 1, nil }
	if n := testing.AllocsPerRun(1000, func() { _, _ = DoValue(ctx, okv) }); n != 0 {
		t.Fatalf("DoValue: %v allocs", n)
	}
}

var sinkErr error

func BenchmarkDoFirstAttemptSuccess(b *testing.B) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		sinkErr = Do(ctx, ok)
	}
}

func BenchmarkDirectCall(b *testing.B) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		sinkErr = ok(ctx)
	}
}

// WithMaxElapsed promises a limit counted from when the first attempt
// started, through every entry point: a first attempt of 15 ms leaves no
// room for a 10 ms wait under a 20 ms limit (counted from the first
// failure, the wait would fit). Time is exact inside the bubble.
func TestMaxElapsedCountsFromDoStart(t *testing.T) {
	const limit = 20 * time.Millisecond
	slowFirst := func() (func(context.Context) error, *int) {
		calls := 0
		return func(context.Context) error {
			calls++
			if calls == 1 {
				time.Sleep(15 * time.Millisecond) // the operation itself is slow
			}
			return causeErr("stale")
		}, &calls
	}
	opts := []Option{WithMaxElapsed(limit), WithBackoff(Constant(10 * time.Millisecond)), WithMaxAttempts(100)}
	for name, run := range map[string]func(ctx context.Context, fn func(context.Context) error) error{
		"Do":        func(ctx context.Context, fn func(context.Context) error) error { return Do(ctx, fn, opts...) },
		"Policy.Do": func(ctx context.Context, fn func(context.Context) error) error { return New(opts...).Do(ctx, fn) },
		"DoValue": func(ctx context.Context, fn func(context.Context) error) error {
			_, err := DoValue(ctx, func(ctx context.Context) (int, error) { return 0, fn(ctx) }, opts...)
			return err
		},
		"Wrap": func(ctx context.Context, fn func(context.Context) error) error {
			_, err := Wrap(func(ctx context.Context, _ int) (int, error) { return 0, fn(ctx) }, opts...)(ctx, 1)
			return err
		},
		"WrapErr": func(ctx context.Context, fn func(context.Context) error) error {
			return WrapErr(func(ctx context.Context, _ int) error { return fn(ctx) }, opts...)(ctx, 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fn, calls := slowFirst()
				err := run(t.Context(), fn)
				var ex *ExhaustedError
				if !errors.As(err, &ex) || ex.Reason != ReasonElapsed || ex.Attempts != 1 {
					t.Fatalf("got %v", err)
				}
				if *calls != 1 {
					t.Fatalf("ran %d times; the first attempt's 15ms and a 10ms wait pass the %v limit", *calls, limit)
				}
			})
		})
	}
}

// An outer retry around an inner one that ran out must not run the inner
// one's whole budget again: the exhausted error is final, while errors.Is
// and errors.As still see its cause.
func TestExhaustedInnerRetryIsNotRetriedByOuter(t *testing.T) {
	ctx := context.Background()
	stale := causeErr("stale")
	var waits []time.Duration
	for name, outer := range map[string]func(fn func(context.Context) error) error{
		"Do":        func(fn func(context.Context) error) error { return Do(ctx, fn, noSleep(&waits)) },
		"Policy.Do": func(fn func(context.Context) error) error { return New(noSleep(&waits)).Do(ctx, fn) },
		"WrapErr": func(fn func(context.Context) error) error {
			return WrapErr(func(ctx context.Context, _ int) error { return fn(ctx) }, noSleep(&waits))(ctx, 1)
		},
		"RetryIf everything": func(fn func(context.Context) error) error {
			return Do(ctx, fn, noSleep(&waits), RetryIf(func(error) (bool, string) { return true, "any" }))
		},
	} {
		t.Run(name, func(t *testing.T) {
			innerRuns, outerRuns := 0, 0
			err := outer(func(ctx context.Context) error {
				outerRuns++
				return Do(ctx, func(context.Context) error { innerRuns++; return stale },
					WithMaxAttempts(3), noSleep(&waits))
			})
			if innerRuns != 3 || outerRuns != 1 {
				t.Fatalf("inner fn ran %d times, outer %d; want 3 and 1", innerRuns, outerRuns)
			}
			var ex *ExhaustedError
			if !errors.As(err, &ex) || ex.Attempts != 3 || !errors.Is(err, ErrExhausted) || !errors.Is(err, stale) {
				t.Fatalf("want the inner *ExhaustedError wrapping the cause, got %v", err)
			}
			if !IsPermanent(err) {
				t.Fatal("an exhausted error must be permanent")
			}
		})
	}
}
