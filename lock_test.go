package sqlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

func TestMain(m *testing.M) {
	// The examples connect to DATABASE_URL, as a program would.
	pgtest.MainWithDSN(m)
}

// backend is one way to get a sqlock.Acquirer: the only line a caller
// changes to switch. The backends of this module are listed here;
// redislock, etcdlock and dynamo are modules of their own (a test here
// would pull their clients into this module's graph) and each runs the
// same promises from its own conformance test.
type backend struct {
	name   string
	fenced bool
	open   func(t *testing.T, db *pgtest.DB, timeout time.Duration) sqlock.Acquirer
}

var backends = []backend{
	{"advisory", false, func(t *testing.T, db *pgtest.DB, timeout time.Duration) sqlock.Acquirer {
		return advisory.New(db.OpenSQL(), advisory.WithTimeout(timeout), advisory.WithKeepalive(100*time.Millisecond)).Acquirer()
	}},
	{"lease", true, func(t *testing.T, db *pgtest.DB, timeout time.Duration) sqlock.Acquirer {
		pool := db.OpenPool(nil)
		if err := lease.Migrate(context.Background(), pool); err != nil {
			t.Fatal(err)
		}
		return lease.New(pool, lease.WithTimeout(timeout)).Acquirer(2 * time.Second)
	}},
}

// increment is the critical section, written once against the interfaces:
// a read-modify-write of a counter row with the round trips between read
// and write that make an unprotected one lose updates. If the lock mints
// fencing tokens, the row also keeps the last token, which must grow.
func increment(ctx context.Context, locks sqlock.Acquirer, db *sql.DB, inside *atomic.Int32) error {
	lk, err := locks.Acquire(ctx, "counter")
	if err != nil {
		return err
	}
	defer lk.Release(ctx) // on an error below; ErrNotHeld after the Release at the end
	if n := inside.Add(1); n != 1 {
		return fmt.Errorf("%d holders inside the critical section", n)
	}
	err = func() error {
		ctx, cancel := lk.Context(ctx) // ends if the lock is lost
		defer cancel()
		var n, last int64
		if err := db.QueryRowContext(ctx, "SELECT n, token FROM counter").Scan(&n, &last); err != nil {
			return err
		}
		token := last
		if f, ok := lk.(sqlock.Fenced); ok {
			if token = f.Token(); token <= last {
				return fmt.Errorf("token %d after %d", token, last)
			}
		}
		_, err := db.ExecContext(ctx, "UPDATE counter SET n = $1, token = $2", n+1, token)
		return err
	}()
	inside.Add(-1) // before the lock is given up
	if err != nil {
		return err
	}
	return lk.Release(ctx)
}

// TestSameCriticalSectionOnEveryBackend: one critical section, written
// against sqlock.Acquirer and sqlock.Lock, runs unchanged on advisory
// session locks and on leases — 8 goroutines on two pools each, against a
// real PostgreSQL — with no holder ever beside another and no lost
// increment in the database; on leases, whose locks are sqlock.Fenced, the
// tokens grow in the order holders entered.
func TestSameCriticalSectionOnEveryBackend(t *testing.T) {
	const goroutines, rounds = 8, 20
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db := pgtest.New(t)
			db.Exec("CREATE TABLE counter (n bigint NOT NULL, token bigint NOT NULL); INSERT INTO counter VALUES (0, 0)")
			ctx := context.Background()
			locks := []sqlock.Acquirer{b.open(t, db, 30*time.Second), b.open(t, db, 30*time.Second)} // two "replicas"
			data := db.OpenSQL()
			var inside atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, goroutines*rounds)
			for g := range goroutines {
				wg.Go(func() {
					for range rounds {
						if err := increment(ctx, locks[g%2], data, &inside); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var n, token int64
			if err := data.QueryRowContext(ctx, "SELECT n, token FROM counter").Scan(&n, &token); err != nil {
				t.Fatal(err)
			}
			if n != goroutines*rounds {
				t.Fatalf("counter = %d after %d locked increments: updates were lost", n, goroutines*rounds)
			}
			if b.fenced != (token > 0) {
				t.Fatalf("last token %d: want tokens only from a fenced backend (fenced: %v)", token, b.fenced)
			}
		})
	}
}

// TestBackendsReportTheSharedOutcomes: whichever backend, a try-once on a
// held lock matches sqlock.ErrNotAcquired, a wait that runs out matches
// sqlock.ErrTimeout (neither returns a non-nil Lock), and a lock whose
// hold ends behind its holder's back — its session terminated, its lease
// taken over — closes Lost, ends its Context and reports sqlock.ErrLost.
func TestBackendsReportTheSharedOutcomes(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db := pgtest.New(t)
			ctx := context.Background()
			// other's wait bound runs out in the test; it must still cover
			// connecting (and advisory's first-use probe) on a busy machine.
			bound := max(time.Second, 200*db.Latency())
			holder, other := b.open(t, db, 10*time.Second), b.open(t, db, bound)
			lk, err := holder.Acquire(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Release(ctx)
			if got, err := other.TryAcquire(ctx, "job"); !errors.Is(err, sqlock.ErrNotAcquired) || got != nil {
				t.Fatalf("TryAcquire of a held lock: %v, %v; want nil, ErrNotAcquired", got, err)
			}
			if got, err := other.Acquire(ctx, "job"); !errors.Is(err, sqlock.ErrTimeout) || got != nil {
				t.Fatalf("Acquire of a held lock: %v, %v; want nil, ErrTimeout", got, err)
			}
			lctx, cancel := lk.Context(ctx)
			defer cancel()
			// End the hold behind the holder's back.
			switch b.name {
			case "advisory":
				db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'
					AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) // this test's only
			case "lease":
				db.Exec("UPDATE sqlock_leases SET owner = gen_random_uuid() WHERE name = 'job'")
			}
			select {
			case <-lk.Lost():
			case <-time.After(10 * time.Second): // far beyond a keepalive or a renewal interval
				t.Fatal("Lost not closed after the hold ended")
			}
			<-lctx.Done()
			if !errors.Is(lk.Err(), sqlock.ErrLost) || !errors.Is(context.Cause(lctx), sqlock.ErrLost) {
				t.Fatalf("Err = %v, Context's cause = %v; want both to match sqlock.ErrLost", lk.Err(), context.Cause(lctx))
			}
		})
	}
}

// TestBackendsRefuseABadNameWithTheSharedWord: whichever backend, the
// empty name is an error matching sqlock.ErrInvalidArgument, with no
// Lock, for Acquire and TryAcquire alike.
func TestBackendsRefuseABadNameWithTheSharedWord(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			locks := b.open(t, pgtest.New(t), time.Second)
			ctx := context.Background()
			for name, f := range map[string]func(context.Context, string) (sqlock.Lock, error){"Acquire": locks.Acquire, "TryAcquire": locks.TryAcquire} {
				if lk, err := f(ctx, ""); !errors.Is(err, sqlock.ErrInvalidArgument) || lk != nil {
					t.Errorf("%s(\"\"): %v, %v; want nil, an error matching sqlock.ErrInvalidArgument", name, lk, err)
				}
			}
		})
	}
}
