package redislock_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// TestHolderReadsTheLabelAndPayloadStoredWithTheLock: a Locker's label and
// payload are stored with its lock, read back by any Locker with the
// holder's owner and token, kept by a renewal (which extends the holder's
// hash with the lock), and gone with the lock at Release; a lock without
// them reads with its owner and token and no label.
func TestHolderReadsTheLabelAndPayloadStoredWithTheLock(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	c := redistest.New(t, redistest.Options{}).Client(t, nil)
	payload := []byte{0, 1, 2, 0xff, 'x'}
	labelled := redislock.New(c, redislock.WithHolder("host-a pid 42"), redislock.WithPayload(payload))
	reader := redislock.New(c)

	// The renewal is sent by hand (RenewNow): with a TTL no stall of a
	// busy machine reaches, nothing here depends on the timer's speed.
	const ttl = time.Minute
	l, err := labelled.Acquire(ctx, "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		h, held, err := reader.Holder(ctx, "job")
		if err != nil || !held {
			t.Fatalf("%s: Holder = %v, %v", when, held, err)
		}
		if h.Label != "host-a pid 42" || !bytes.Equal(h.Payload, payload) || h.Token != l.Token() || h.Owner == "" || h.TTL <= 0 {
			t.Fatalf("%s: Holder = %+v, want the label, the payload and token %d", when, h, l.Token())
		}
	}
	check("after the grant")
	// Shorten the hash's life by hand: the renewal must give it the
	// lock's TTL again, or it would expire before the lock.
	const short = 5 * time.Second
	if err := c.PExpire(ctx, redislock.HolderKey("job"), short).Err(); err != nil {
		t.Fatal(err)
	}
	if refused, err := redislock.RenewNow(ctx, l); refused || err != nil {
		t.Fatalf("renewal: refused %v, %v", refused, err)
	}
	if left := c.PTTL(ctx, redislock.HolderKey("job")).Val(); left <= short {
		t.Fatalf("after the renewal the holder's hash expires in %v, not with the lock (TTL %v)", left, ttl)
	}
	check("after renewals")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, held, err := reader.Holder(ctx, "job"); held || err != nil {
		t.Fatalf("after Release: held %v, %v", held, err)
	}
	if n := c.Exists(ctx, redislock.HolderKey("job")).Val(); n != 0 {
		t.Fatal("Release left the holder's hash behind")
	}

	plain, err := reader.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release(ctx)
	h, held, err := reader.Holder(ctx, "job")
	if err != nil || !held || h.Label != "" || h.Payload != nil || h.Token != plain.Token() {
		t.Fatalf("a plain lock's Holder = %+v, %v, %v; want no label and token %d", h, held, err, plain.Token())
	}
}

// TestHolderLabelsAreBounded: a label over MaxHolderLen, not UTF-8 or
// with a NUL byte, or a payload over MaxPayloadLen, is ErrInvalid and sqlock.ErrInvalidArgument from every
// method, and nothing is written; at the bounds they are stored whole.
// Redlock refuses both options (ErrUnsupported).
func TestHolderLabelsAreBounded(t *testing.T) {
	leakCheck(t)
	ctx := t.Context()
	c := redistest.New(t, redistest.Options{}).Client(t, nil)
	for _, lk := range []*redislock.Locker{
		redislock.New(c, redislock.WithHolder(strings.Repeat("h", redislock.MaxHolderLen+1))),
		redislock.New(c, redislock.WithPayload(make([]byte, redislock.MaxPayloadLen+1))),
		redislock.New(c, redislock.WithHolder("not\xffUTF-8")),
		redislock.New(c, redislock.WithHolder("a\x00b")),
	} {
		_, err := lk.TryAcquire(ctx, "job", time.Second)
		_, err2 := lk.AcquireAll(ctx, []string{"job"}, time.Second)
		_, _, err3 := lk.Holder(ctx, "job")
		for _, err := range []error{err, err2, err3} {
			if !errors.Is(err, redislock.ErrInvalid) || !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Fatalf("oversized label or payload: %v, want ErrInvalid and sqlock.ErrInvalidArgument", err)
			}
		}
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("refused options wrote %d keys", n)
	}
	label, payload := strings.Repeat("h", redislock.MaxHolderLen), bytes.Repeat([]byte{7}, redislock.MaxPayloadLen)
	l, err := redislock.New(c, redislock.WithHolder(label), redislock.WithPayload(payload)).TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	h, _, err := redislock.New(c).Holder(ctx, "job")
	if err != nil || h.Label != label || !slices.Equal(h.Payload, payload) {
		t.Fatalf("at the bounds: %d-byte label, %d-byte payload, %v", len(h.Label), len(h.Payload), err)
	}
	r := redislock.NewRedlock(clients(t, redistest.NewN(t, 3, redistest.Options{})), redislock.WithHolder("x"))
	if _, err := r.TryAcquire(ctx, "job", time.Second); !errors.Is(err, sqlock.ErrUnsupported) {
		t.Fatalf("Redlock with WithHolder: %v, want ErrUnsupported", err)
	}
}
