package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlock/sqlock/retry"
)

// staleErr stands in for versioned.StaleError: any error with a RetryCause.
type staleErr struct{}

func (staleErr) Error() string      { return "stale version" }
func (staleErr) RetryCause() string { return "stale" }

func ExampleDo() {
	attempts := 0
	err := retry.Do(context.Background(), func(ctx context.Context) error {
		attempts++
		// Re-read the row, apply the change, write it with the version guard.
		if attempts < 3 {
			return staleErr{} // someone else won the race this time
		}
		return nil
	}, retry.WithMaxAttempts(5))
	fmt.Println(attempts, err)
	// Output: 3 <nil>
}

func ExampleDoValue() {
	balance, err := retry.DoValue(context.Background(), func(ctx context.Context) (int, error) {
		return 120, nil
	})
	fmt.Println(balance, err)
	// Output: 120 <nil>
}

type Repo struct{ calls int }

func (r *Repo) Reserve(ctx context.Context, seat string) (string, error) {
	r.calls++
	if r.calls == 1 {
		return "", staleErr{}
	}
	return "reserved " + seat, nil
}

// Wrap turns a repository method into a retrying one; the options are read
// once.
func ExampleWrap() {
	repo := &Repo{}
	reserve := retry.Wrap(repo.Reserve, retry.WithBackoff(retry.Exponential(time.Millisecond, 50*time.Millisecond)))
	got, err := reserve(context.Background(), "42A")
	fmt.Println(got, err, repo.calls)
	// Output: reserved 42A <nil> 2
}

func ExampleStop() {
	calls := 0
	err := retry.Do(context.Background(), func(ctx context.Context) error {
		calls++
		return retry.Stop(staleErr{}) // give up at once, keep the cause
	})
	fmt.Println(calls, errors.Is(err, staleErr{}))
	// Output: 1 true
}

func ExampleExhaustedError() {
	err := retry.Do(context.Background(), func(ctx context.Context) error {
		return staleErr{}
	}, retry.WithMaxAttempts(2), retry.WithBackoff(retry.Constant(0)))
	var ex *retry.ExhaustedError
	fmt.Println(errors.As(err, &ex), ex.Attempts, ex.Reason, errors.Is(err, retry.ErrExhausted))
	// Output: true 2 attempt limit reached true
}
