package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/observetest"
)

// TestInvalidOptionsRunNothing: a zero or negative limit, or a negative
// wait, is refused with ErrInvalidOption by every entry point before fn
// runs — the same meaning a timeout has in every sqlock package.
func TestInvalidOptionsRunNothing(t *testing.T) {
	bad := map[string]Option{
		"WithMaxAttempts(0)":    WithMaxAttempts(0),
		"WithMaxAttempts(-1)":   WithMaxAttempts(-1),
		"WithMaxElapsed(0)":     WithMaxElapsed(0),
		"WithMaxElapsed(-1s)":   WithMaxElapsed(-time.Second),
		"Exponential(0, 1s)":    WithBackoff(Exponential(0, time.Second)),
		"Exponential(1ms, -1s)": WithBackoff(Exponential(time.Millisecond, -time.Second)),
		"Constant(-1ms)":        WithBackoff(Constant(-time.Millisecond)),
	}
	ctx := context.Background()
	for name, opt := range bad {
		t.Run(name, func(t *testing.T) {
			calls := 0
			fn := func(context.Context) error { calls++; return nil }
			fnv := func(context.Context) (int, error) { calls++; return 1, nil }
			fnIn := func(_ context.Context, x int) (int, error) { calls++; return x, nil }
			errs := map[string]error{
				"Do":     Do(ctx, fn, WithObserver(nil), opt),
				"Policy": New(opt).Do(ctx, fn),
			}
			_, errs["DoValue"] = DoValue(ctx, fnv, opt)
			_, errs["Wrap"] = Wrap(fnIn, opt)(ctx, 1)
			errs["WrapErr"] = WrapErr(func(_ context.Context, _ int) error { calls++; return nil }, opt)(ctx, 1)
			for entry, err := range errs {
				if !errors.Is(err, sqlock.ErrInvalidOption) {
					t.Errorf("%s: got %v, want ErrInvalidOption", entry, err)
				}
			}
			if calls != 0 {
				t.Errorf("fn ran %d times despite an invalid option", calls)
			}
		})
	}
	// Valid edge values: one attempt, an immediate retry.
	if err := Do(ctx, func(context.Context) error { return nil }, WithMaxAttempts(1), WithBackoff(Constant(0))); err != nil {
		t.Fatal(err)
	}
}

// TestNilFunctionIsRefused: every entry point refuses a nil function with
// an error matching sqlock.ErrNilHandle instead of panicking.
func TestNilFunctionIsRefused(t *testing.T) {
	ctx := context.Background()
	errs := map[string]error{
		"Do":        Do(ctx, nil),
		"Policy.Do": New().Do(ctx, nil),
		"WrapErr":   WrapErr[int](nil)(ctx, 1),
	}
	_, errs["DoValue"] = DoValue[int](ctx, nil)
	_, errs["Wrap"] = Wrap[int, int](nil)(ctx, 1)
	for entry, err := range errs {
		if !errors.Is(err, sqlock.ErrNilHandle) {
			t.Errorf("%s(nil): %v, want an error matching sqlock.ErrNilHandle", entry, err)
		}
	}
}

// TestWithObserverOptionsAddUp: several WithObserver options add up (a nil
// one adds nothing), as in every sqlock package.
func TestWithObserverOptionsAddUp(t *testing.T) {
	var a, b observetest.Recorder
	calls := 0
	err := Do(context.Background(), func(context.Context) error {
		if calls++; calls < 3 {
			return stateErr(CodeSerializationFailure)
		}
		return nil
	}, WithObserver(&a), WithObserver(nil), WithObserver(&b), WithBackoff(Constant(0)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(a.Events()), 2; got != want || len(b.Events()) != want {
		t.Fatalf("the two observers saw %d and %d retries, want %d each", got, len(b.Events()), want)
	}
}
