package etcdtest_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var serializable = clientv3.WithSerializable()

// eventually polls cond until it holds, failing the test, saying what
// never happened, a little before the test's deadline.
func eventually(t *testing.T, what string, cond func(ctx context.Context) bool) {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		defer cancel()
	}
	for !cond(ctx) {
		select {
		case <-ctx.Done():
			t.Fatalf("%s never happened", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
