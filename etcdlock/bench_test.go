package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sqlock/sqlock/etcdlock"
)

// BenchmarkAcquireRelease: one acquire and release of a free name on the
// shared three-member cluster, beside etcd's own concurrency.Mutex in the
// same run — on a session reused for every lock (its fastest form, with
// one TTL for all) and on a session of its own per lock (what a TTL per
// lock, as etcdlock's API has, costs it).
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	cl := sharedClient(b)
	b.Run("etcdlock", func(b *testing.B) {
		lk := etcdlock.New(cl)
		for b.Loop() {
			l, err := lk.Acquire(ctx, "bench", 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mutex-session-reused", func(b *testing.B) {
		s, err := concurrency.NewSession(cl, concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for b.Loop() {
			m := concurrency.NewMutex(s, "sqlock-bench/mutex-reused")
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mutex-session-per-lock", func(b *testing.B) {
		for b.Loop() {
			s, err := concurrency.NewSession(cl, concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			m := concurrency.NewMutex(s, "sqlock-bench/mutex-per-lock")
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
