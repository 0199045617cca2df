package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
)

// TestSemaphoreRefusedAdvisory: advisory's semaphores are a documented
// refusal: Acquire and TryAcquire, of any size and name, fail with
// ErrNoSemaphores (matching sqlock.ErrUnsupported) and return no slot,
// and nothing is sent — the Locker's database cannot be reached at all.
func TestSemaphoreRefusedAdvisory(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, n := range []int{0, 1, 3} {
		sem := advisory.New(db).Semaphore(n, 10*time.Second)
		if sem.Size() != n {
			t.Errorf("Size %d, want %d", sem.Size(), n)
		}
		for op, call := range map[string]func(context.Context, string) (sqlock.Slot, error){
			"Acquire": sem.Acquire, "TryAcquire": sem.TryAcquire,
		} {
			sl, err := call(context.Background(), "jobs")
			if sl != nil || !errors.Is(err, advisory.ErrNoSemaphores) || !errors.Is(err, sqlock.ErrUnsupported) {
				t.Errorf("%s of a semaphore of %d: %v, %v; want nil and ErrNoSemaphores (ErrUnsupported)", op, n, sl, err)
			}
		}
	}
}
