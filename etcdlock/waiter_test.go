package etcdlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The waiter's keepalives are driven by timers: these tests run them in a
// synctest bubble, on its fake clock, against a fake keepalive and a watch
// channel the test feeds. What holds on the real cluster at any speed
// (the line's order, the waiter served with a greater token) is in
// lock_test.go.

// fakeWaiter is a waiter of a 3 s lease granted now, whose keepalives
// answer err and are counted at the fake times they were sent.
func fakeWaiter(err func() error) (w *waiter, sent *[]time.Time) {
	sent = new([]time.Time)
	w = newWaiter(nil, 1, 3*time.Second, time.Now())
	w.keepAlive = func(ctx context.Context, _ clientv3.LeaseID) error {
		*sent = append(*sent, time.Now())
		return err()
	}
	return w, sent
}

type eventsResult struct {
	deleted     bool
	broken, err error
}

// TestWaiterOutlivesItsTTL: a waiter keeps its own lease alive every
// TTL/3 while it waits, so a wait three times its TTL sends nine
// keepalives, one each TTL/3, and ends when its predecessor's key is
// deleted, not before.
func TestWaiterOutlivesItsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		w, sent := fakeWaiter(func() error { return nil })
		ch := make(chan clientv3.WatchResponse)
		done := make(chan eventsResult, 1)
		go func() {
			d, b, err := w.events(context.Background(), ch)
			done <- eventsResult{d, b, err}
		}()
		time.Sleep(3 * w.ttl)
		synctest.Wait()
		select {
		case r := <-done:
			t.Fatalf("the wait ended before its predecessor's key was deleted: %+v", r)
		default:
		}
		if len(*sent) != 9 {
			t.Fatalf("%d keepalives in three TTLs, want 9", len(*sent))
		}
		for i, at := range *sent {
			if want := start.Add(time.Duration(i+1) * w.ttl / 3); !at.Equal(want) {
				t.Fatalf("keepalive %d sent at +%v, want +%v", i, at.Sub(start), want.Sub(start))
			}
		}
		if !w.sent.Equal((*sent)[8]) {
			t.Fatalf("the lease trusted from +%v, want the last keepalive's +%v", w.sent.Sub(start), (*sent)[8].Sub(start))
		}
		ch <- clientv3.WatchResponse{Events: []*clientv3.Event{{Type: mvccpb.DELETE}}}
		if r := <-done; !r.deleted || r.broken != nil || r.err != nil {
			t.Fatalf("after the predecessor's delete: %+v, want deleted", r)
		}
	})
}

// TestWaiterGivesUpWithoutKeepalive: a waiter whose keepalives fail tries
// again every retryPause and gives up its place once none was confirmed
// within its TTL — at the TTL, before the cluster can have expired its
// lease unnoticed; one the cluster refused (the lease is gone) gives up
// at once; one whose context ends, at its end.
func TestWaiterGivesUpWithoutKeepalive(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		cancel time.Duration // the context's end, if any
		at     time.Duration // when the wait must end, on the fake clock
		is     error
	}{
		{name: "unanswered", err: errors.New("unavailable"), at: 3 * time.Second},
		{name: "lease gone", err: rpctypes.ErrLeaseNotFound, at: time.Second, is: rpctypes.ErrLeaseNotFound},
		{name: "cancelled", cancel: 1500 * time.Millisecond, at: 1500 * time.Millisecond, is: context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if c.cancel > 0 {
					time.AfterFunc(c.cancel, cancel)
				}
				w, sent := fakeWaiter(func() error { return c.err })
				_, _, err := w.events(ctx, make(chan clientv3.WatchResponse))
				if err == nil || c.is != nil && !errors.Is(err, c.is) {
					t.Fatalf("wait: %v, want an error matching %v", err, c.is)
				}
				if got := time.Since(start); got != c.at {
					t.Fatalf("the wait ended at +%v on the fake clock, want +%v", got, c.at)
				}
				if c.err != nil && c.is == nil && len(*sent) < 2 {
					t.Fatalf("%d keepalives sent, want the failed one tried again", len(*sent))
				}
			})
		})
	}
}
