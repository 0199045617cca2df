package advisory

import (
	"context"
	"testing"
	"time"
)

// nullBackend answers every statement at once: it measures what the
// package itself costs per cycle, apart from the network and the server.
type nullBackend struct{}

func (nullBackend) conn(context.Context) (session, error) { return nullSession{}, nil }
func (nullBackend) maxConns() int                         { return 0 }
func (nullBackend) connsInUse() int                       { return 0 }
func (nullBackend) handle() any                           { return nil }

type nullSession struct{}

func (nullSession) queryRow(_ context.Context, _ time.Time, _ string, _ []any, dest ...any) error {
	if b, ok := dest[0].(*bool); ok {
		*b = true
	}
	return nil
}
func (nullSession) exec(context.Context, time.Time, string) error { return nil }
func (nullSession) wait(context.Context, time.Time, time.Duration, string) (bool, error) {
	return false, nil
}
func (nullSession) release() {}
func (nullSession) destroy() {}

// BenchmarkOverhead is the package's own CPU cost of an uncontended
// TryLock+Release cycle (bounded contexts, the keepalive timer, the
// observer), without any I/O; a real cycle adds two round trips.
func BenchmarkOverhead(b *testing.B) {
	l := newLocker(nullBackend{}, nil)
	l.verified.Store(true)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		lk, err := l.TryLock(ctx, KeyInt(int64(i)))
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
