package txlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// TestNestedSameKey: a transaction asked for from inside another's fn, with
// fn's context and on the same handle, on a key the outer one holds in a
// conflicting mode, is
// refused at once with ErrAlreadyHeld — without WithTimeout it would wait
// forever for a lock its own caller holds, a cycle the server cannot see.
// Shared inside shared, other keys, and the same key on another database
// run as usual.
func TestNestedSameKey(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	a, b, c := advisory.KeyOf("nested:a"), advisory.KeyOf("nested:b"), advisory.KeyPair(9, 9)
	otherDB := pgtest.New(t)
	others := backends(t, otherDB, bePgxPool, beFold, bePQ)
	for i, be := range backends(t, db, bePgxPool, beFold, bePQ) {
		other := others[i]
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			for _, tc := range []struct {
				name          string
				outer, inner  []advisory.Key
				oshared, ishr bool
				conflict      bool
			}{
				{"same key", []advisory.Key{a}, []advisory.Key{a}, false, false, true},
				{"overlapping sets", []advisory.Key{a, c}, []advisory.Key{b, c}, false, false, true},
				{"shared inside exclusive", []advisory.Key{a}, []advisory.Key{a}, false, true, true},
				{"exclusive inside shared", []advisory.Key{a}, []advisory.Key{a}, true, false, true},
				{"shared inside shared", []advisory.Key{a}, []advisory.Key{a}, true, true, false},
				{"other key", []advisory.Key{a}, []advisory.Key{b}, false, false, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					mode := func(shared bool) []txlock.Option {
						o := []txlock.Option{txlock.WithTimeout(time.Hour)} // a missed conflict hangs: the test's timeout catches it
						if shared {
							o = append(o, txlock.Shared())
						}
						return o
					}
					innerRan := false
					err := be.do(ctx, tc.outer, func(ctx context.Context, _ q) error {
						return be.do(ctx, tc.inner, func(context.Context, q) error {
							innerRan = true
							return nil
						}, mode(tc.ishr)...)
					}, mode(tc.oshared)...)
					if !tc.conflict {
						if err != nil || !innerRan {
							t.Fatalf("err = %v, inner ran = %v; want both to run", err, innerRan)
						}
						return
					}
					if !errors.Is(err, txlock.ErrAlreadyHeld) || !errors.Is(err, advisory.ErrAlreadyHeld) {
						t.Fatalf("err = %v, want ErrAlreadyHeld", err)
					}
					if innerRan {
						t.Fatal("the inner transaction ran")
					}
				})
			}
			// The same key on another handle — here another database,
			// whose advisory locks are its own — is not a conflict.
			err := be.do(ctx, []advisory.Key{a}, func(ctx context.Context, _ q) error {
				return other.do(ctx, []advisory.Key{a}, func(context.Context, q) error { return nil }, txlock.WithTimeout(time.Hour))
			})
			if err != nil {
				t.Fatalf("same key on another database: %v", err)
			}

			// Without fn's context there is nothing to see: the inner
			// transaction waits, here until its timeout.
			err = be.do(ctx, []advisory.Key{a}, func(context.Context, q) error {
				return be.do(ctx, []advisory.Key{a}, func(context.Context, q) error { return nil }, txlock.WithTimeout(50*time.Millisecond))
			})
			if !errors.Is(err, txlock.ErrTimeout) {
				t.Fatalf("nested without fn's context: %v, want ErrTimeout", err)
			}
		})
	}
}

// TestNestedAcrossPackages: session locks (advisory) and transaction locks
// share one lock space, so a txlock transaction inside advisory.Do on the
// same key and pool — or advisory.Lock inside txlock's fn — would wait for
// its own caller. Both are refused at once; another key, or shared inside
// shared, runs.
func TestNestedAcrossPackages(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	ctx := context.Background()
	pool := db.OpenPool(nil)
	l := advisory.NewPool(pool)
	k, other := advisory.KeyOf("across:a"), advisory.KeyOf("across:b")
	nop := func(context.Context, pgx.Tx) error { return nil }

	err := l.Do(ctx, k, func(ctx context.Context) error {
		return txlock.DoPgx(ctx, pool, k, nop, txlock.WithTimeout(time.Hour))
	})
	if !errors.Is(err, txlock.ErrAlreadyHeld) || !errors.Is(err, advisory.ErrAlreadyHeld) {
		t.Fatalf("txlock inside advisory.Do, same key: %v, want ErrAlreadyHeld", err)
	}
	if err := l.Do(ctx, k, func(ctx context.Context) error { return txlock.DoPgx(ctx, pool, other, nop) }); err != nil {
		t.Fatalf("txlock inside advisory.Do, other key: %v", err)
	}
	if err := l.DoShared(ctx, k, func(ctx context.Context) error {
		return txlock.DoPgx(ctx, pool, k, nop, txlock.Shared())
	}); err != nil {
		t.Fatalf("shared inside shared: %v", err)
	}

	err = txlock.DoPgx(ctx, pool, k, func(ctx context.Context, _ pgx.Tx) error {
		lk, err := l.Lock(ctx, k)
		if err == nil {
			lk.Release(ctx)
		}
		return err
	})
	if !errors.Is(err, advisory.ErrAlreadyHeld) {
		t.Fatalf("advisory.Lock inside txlock's fn, same key: %v, want advisory.ErrAlreadyHeld", err)
	}
	err = txlock.DoPgx(ctx, pool, k, func(ctx context.Context, _ pgx.Tx) error {
		return l.Do(ctx, other, func(context.Context) error { return nil })
	})
	if err != nil {
		t.Fatalf("advisory inside txlock's fn, other key: %v", err)
	}
}
