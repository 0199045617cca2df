package dynamo_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/dynamo"
	"github.com/sqlock/sqlock/dynamo/internal/dynamotest"
	"github.com/sqlock/sqlock/versioned"
)

// lockTable creates a lock table of its own for t.
func lockTable(t testing.TB, c *dynamodb.Client) string {
	t.Helper()
	name := dynamotest.Table(t)
	if err := dynamo.CreateLockTable(context.Background(), c, name); err != nil {
		t.Fatal(err)
	}
	return name
}

func lockItem(t testing.TB, c *dynamodb.Client, table, name string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{dynamo.AttrName: s(name)}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// TestHeldLockIsNotAcquiredAndTokensIncrease: a held lock refuses
// TryAcquire with ErrNotAcquired; after Release the next holder's token is
// larger, the counter kept in the item; a second Release is ErrNotHeld.
func TestHeldLockIsNotAcquiredAndTokensIncrease(t *testing.T) {
	c := client(t)
	lk := dynamo.NewLocker(c, lockTable(t, c))
	var last int64
	for i := range 5 {
		l, err := lk.TryAcquire(t.Context(), "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("holder %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if _, err := lk.TryAcquire(t.Context(), "job", time.Minute); !errors.Is(err, sqlock.ErrNotAcquired) || !errors.Is(err, dynamo.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held lock: %v", err)
		}
		other := dynamo.NewLocker(c, lk.Table())
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		_, err = other.Acquire(ctx, "job", time.Minute)
		cancel()
		if !errors.Is(err, sqlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire of a held lock past the caller's deadline: %v", err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); !errors.Is(err, dynamo.ErrNotHeld) {
			t.Fatalf("second Release: %v", err)
		}
		if l.Err() != nil {
			t.Fatalf("a released lock reports %v", l.Err())
		}
	}
	item := lockItem(t, c, lk.Table(), "job")
	if item[dynamo.AttrOwner] != nil || num(item, dynamo.AttrFence) != strconv.FormatInt(last, 10) {
		t.Fatalf("item after the last Release: %v", item)
	}
}

// TestAcquireExcludesAcrossGoroutines: 16 goroutines × 5 acquisitions of
// one lock through Acquire; no two inside at once, tokens all distinct.
func TestAcquireExcludesAcrossGoroutines(t *testing.T) {
	c := client(t)
	table := lockTable(t, c)
	var inside, overlaps atomic.Int64
	var mu sync.Mutex
	tokens := map[int64]bool{}
	var wg sync.WaitGroup
	for range 16 {
		lk := dynamo.NewLocker(c, table, dynamo.WithTimeout(5*time.Minute))
		wg.Go(func() {
			for range 5 {
				l, err := lk.Acquire(t.Context(), "x", 30*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				if tokens[l.Token()] {
					t.Errorf("token %d granted twice", l.Token())
				}
				tokens[l.Token()] = true
				mu.Unlock()
				inside.Add(-1)
				if err := l.Release(t.Context()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 || len(tokens) != 80 {
		t.Fatalf("%d overlaps, %d tokens; want 0, 80", overlaps.Load(), len(tokens))
	}
}

// TestVanishedHolderIsTakenOverAfterItsTTL: an item left held by a holder
// that never renews (written by hand, TTL 300 ms) refuses TryAcquire until
// this Locker has watched its record version unchanged for the TTL; then
// TryAcquire takes it over, with a larger token.
func TestVanishedHolderIsTakenOverAfterItsTTL(t *testing.T) {
	c := client(t)
	table := lockTable(t, c)
	put(t, c, table, map[string]types.AttributeValue{dynamo.AttrName: s("job"), dynamo.AttrOwner: s("ghost"),
		dynamo.AttrRV: s("r1"), dynamo.AttrLease: n("300"), dynamo.AttrFence: n("41")})
	lk := dynamo.NewLocker(c, table)
	ctx := testCtx(t)
	refused := 0
	for {
		l, err := lk.TryAcquire(ctx, "job", time.Minute)
		if errors.Is(err, sqlock.ErrNotAcquired) {
			refused++
			select {
			case <-ctx.Done():
				t.Fatalf("never taken over: %d TryAcquires refused before the test's deadline", refused)
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if refused == 0 || l.Token() != 42 {
			t.Fatalf("taken over after %d refusals with token %d; want some refusals, token 42", refused, l.Token())
		}
		l.Release(t.Context())
		return
	}
}

// TestRenewedHolderIsNeverTakenOver: while a holder renews (TTL 2 s, every
// 667 ms), a waiter with a wait bound of two TTLs never gets it.
func TestRenewedHolderIsNeverTakenOver(t *testing.T) {
	c := client(t)
	table := lockTable(t, c)
	l, err := dynamo.NewLocker(c, table).Acquire(t.Context(), "job", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = dynamo.NewLocker(c, table, dynamo.WithTimeout(4*time.Second)).Acquire(t.Context(), "job", time.Minute)
	if !errors.Is(err, sqlock.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter: %v; want ErrTimeout (the Locker's bound); holder: %v", err, l.Err())
	}
	if l.Err() != nil {
		t.Fatalf("holder: %v", l.Err())
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestTakenOverHolderIsLostAndItsFencedWriteRefused: the item overwritten
// by another owner (a takeover) makes the holder's next renewal refused:
// Lost closes, Err and Context's cause match ErrLost, Release is
// ErrNotHeld and leaves the new owner; a fenced write with the old token
// after the new holder's is versioned.ErrFenced.
func TestTakenOverHolderIsLostAndItsFencedWriteRefused(t *testing.T) {
	c := client(t)
	table := lockTable(t, c)
	data := dynamo.NewTable(c, itemTable(t, c), "id")
	put(t, c, data.Name(), map[string]types.AttributeValue{"id": s("reg")})
	lk := dynamo.NewLocker(c, table)
	old, err := lk.Acquire(t.Context(), "job", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := old.Context(t.Context())
	defer cancel()
	if err := data.UpdateFenced(octx, dynamo.Key{"reg"}, dynamo.Set("v", "old")); err != nil {
		t.Fatal(err)
	}
	// The takeover, as another Locker's grant would write it.
	put(t, c, table, map[string]types.AttributeValue{dynamo.AttrName: s("job"), dynamo.AttrOwner: s("new"),
		dynamo.AttrRV: s("r9"), dynamo.AttrLease: n("60000"), dynamo.AttrFence: n(strconv.FormatInt(old.Token()+1, 10))})
	newCtx := sqlock.WithFencingToken(t.Context(), old.Token()+1)
	if err := data.UpdateFenced(newCtx, dynamo.Key{"reg"}, dynamo.Set("v", "new")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Lost():
	case <-testCtx(t).Done():
		t.Fatal("the taken-over holder's Lost never closed")
	}
	select {
	case <-octx.Done():
	case <-testCtx(t).Done():
		t.Fatal("the taken-over holder's Context never ended")
	}
	if !errors.Is(old.Err(), sqlock.ErrLost) || !errors.Is(context.Cause(octx), sqlock.ErrLost) {
		t.Fatalf("Err %v, cause %v", old.Err(), context.Cause(octx))
	}
	var fe *versioned.FencedError
	err = data.UpdateFenced(sqlock.WithFencingToken(t.Context(), old.Token()), dynamo.Key{"reg"}, dynamo.Set("v", "late"))
	if !errors.As(err, &fe) || !errors.Is(err, versioned.ErrFenced) || fe.Current != old.Token()+1 {
		t.Fatalf("late fenced write: %v", err)
	}
	if err := old.Release(t.Context()); !errors.Is(err, dynamo.ErrNotHeld) {
		t.Fatalf("Release after the takeover: %v", err)
	}
	if str(lockItem(t, c, table, "job"), dynamo.AttrOwner) != "new" || str(get(t, c, data.Name(), "reg"), "v") != "new" {
		t.Fatal("the old holder changed the new holder's lock or data")
	}
	if err := data.UpdateFenced(newCtx, dynamo.Key{"nobody"}, dynamo.Set("v", "x")); !errors.Is(err, dynamo.ErrMissing) {
		t.Fatalf("fenced write of a missing item: %v", err)
	}
}

// TestLockRefusesBadInputAndSendsNothing: an empty, oversized or non-UTF-8
// name and a TTL under MinTTL match sqlock.ErrInvalidArgument; a nil client
// ErrNilHandle; a bad option ErrInvalidOption.
func TestLockRefusesBadInputAndSendsNothing(t *testing.T) {
	c := client(t)
	lk := dynamo.NewLocker(c, lockTable(t, c))
	long := make([]byte, dynamo.MaxNameLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"", time.Second}, {string(long), time.Second}, {"\xff", time.Second}, {"ok", time.Millisecond}} {
		if _, err := lk.TryAcquire(t.Context(), tc.name, tc.ttl); !errors.Is(err, sqlock.ErrInvalidArgument) {
			t.Errorf("TryAcquire(%.10q, %v): %v", tc.name, tc.ttl, err)
		}
	}
	if _, err := dynamo.NewLocker(nil, "t").TryAcquire(t.Context(), "x", time.Second); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := dynamo.NewLocker(c, "t", dynamo.WithTimeout(0)).Acquire(t.Context(), "x", time.Second); !errors.Is(err, sqlock.ErrInvalidOption) {
		t.Errorf("WithTimeout(0): %v", err)
	}
	if item := lockItem(t, c, lk.Table(), "ok"); item != nil {
		t.Fatalf("a refused call wrote %v", item)
	}
}

// TestServerKilledUnderAHeldLock: dynalite (with its data on disk) killed
// while a lock is held: the holder's renewals fail and its Lost fires; an
// acquisition while the server is down fails with the SDK's error, never
// ErrNotAcquired; started again with its data, the item still names the
// old holder, so a waiter takes the lock over only after watching it for
// the TTL, with a larger token, and the old holder's Release is
// ErrNotHeld and changes nothing.
func TestServerKilledUnderAHeldLock(t *testing.T) {
	srv := dynamotest.New(t, dynamotest.Options{Persist: true})
	c := srv.Client(nil)
	table := lockTable(t, c)
	ctx := testCtx(t)
	old, err := dynamo.NewLocker(c, table).Acquire(ctx, "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Lost():
	case <-ctx.Done():
		t.Fatal("the holder's Lost never closed while the server was down")
	}
	if !errors.Is(old.Err(), sqlock.ErrLost) {
		t.Fatalf("holder: %v; want ErrLost", old.Err())
	}
	if _, err := dynamo.NewLocker(c, table).TryAcquire(ctx, "job", time.Second); err == nil || errors.Is(err, sqlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while the server is down: %v; want the SDK's error", err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if str(lockItem(t, c, table, "job"), dynamo.AttrOwner) == "" {
		t.Fatal("the lock item lost its holder across the restart")
	}
	l, err := dynamo.NewLocker(c, table, dynamo.WithTimeout(time.Minute)).Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if l.Token() <= old.Token() {
		t.Fatalf("token %d after the restart, the old holder's %d", l.Token(), old.Token())
	}
	if err := old.Release(ctx); !errors.Is(err, dynamo.ErrNotHeld) {
		t.Fatalf("the old holder's Release after the takeover: %v; want ErrNotHeld", err)
	}
	if l.Err() != nil {
		t.Fatalf("the new holder after the old one's Release: %v", l.Err())
	}
}
