package etcdlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/etcdlock"
)

// TestWithMaxHoldEndsTheTrustAtItsCap: with WithMaxHold, a lock of a
// one-minute TTL is lost at the cap, long before its lease could expire,
// its Err matching ErrLost (and sqlock's) and naming the maximum hold; the
// lease is still the holder's, so Release revokes it and the name is free.
// A cap that is not positive is ErrInvalidOption.
func TestWithMaxHoldEndsTheTrustAtItsCap(t *testing.T) {
	cl := sharedClient(t)
	ctx := testContext(t)
	l := mustAcquire(t, etcdlock.New(cl, etcdlock.WithMaxHold(200*time.Millisecond)), t.Name(), time.Minute)
	await(t, l.Lost(), "Lost firing at the maximum hold")
	if err := l.Err(); !errors.Is(err, etcdlock.ErrLost) || !errors.Is(err, sqlock.ErrLost) || !strings.Contains(err.Error(), "maximum hold") {
		t.Fatalf("Err %v, want ErrLost for the maximum hold", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release of a capped lock whose lease is still its own: %v", err)
	}
	if n := keys(t, cl, t.Name()); n != 0 {
		t.Fatalf("%d keys after the capped lock's Release, want none", n)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := etcdlock.New(cl, etcdlock.WithMaxHold(d)).TryAcquire(ctx, t.Name(), time.Second); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Errorf("WithMaxHold(%v): %v, want ErrInvalidOption", d, err)
		}
	}
}
