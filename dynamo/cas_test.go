package dynamo_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/dynamo"
)

// TestClaimTaskHasOneWinnerPerRound: the article's claimTask — 64
// goroutines each try to claim the same unclaimed task with one
// conditional UpdateItem, for 10 rounds of a fresh task each: exactly one
// swap per round reports true, the others (false, nil), and the item holds
// the winner's id.
func TestClaimTaskHasOneWinnerPerRound(t *testing.T) {
	c := client(t)
	tasks := dynamo.NewTable(c, itemTable(t, c), "id")
	const claimers, rounds = 64, 10
	for r := range rounds {
		id := "task-" + strconv.Itoa(r)
		put(t, c, tasks.Name(), map[string]types.AttributeValue{"id": s(id), "status": s("unclaimed")})
		var wins atomic.Int64
		winner := make(chan string, claimers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range claimers {
			wg.Go(func() {
				<-start
				worker := fmt.Sprintf("worker-%d", w)
				ok, err := tasks.CompareAndSwap(t.Context(), dynamo.Key{id},
					[]dynamo.Pair{dynamo.Eq("status", "unclaimed")},
					dynamo.Set("status", "claimed"), dynamo.Set("worker", worker))
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					wins.Add(1)
					winner <- worker
				}
			})
		}
		close(start)
		wg.Wait()
		if got := wins.Load(); got != 1 {
			t.Fatalf("round %d: %d winners, want 1", r, got)
		}
		item := get(t, c, tasks.Name(), id)
		if w := <-winner; str(item, "worker") != w || str(item, "status") != "claimed" {
			t.Fatalf("round %d: item %v, winner %s", r, item, w)
		}
	}
}

// TestCompareAndSwapNeverCreatesAnItem: a swap on a missing item loses,
// even when its only expectation is an absent attribute, and creates
// nothing.
func TestCompareAndSwapNeverCreatesAnItem(t *testing.T) {
	c := client(t)
	tasks := dynamo.NewTable(c, itemTable(t, c), "id")
	ok, err := tasks.CompareAndSwap(t.Context(), dynamo.Key{"nobody"}, []dynamo.Pair{dynamo.Eq("worker", nil)}, dynamo.Set("worker", "w"))
	if ok || err != nil {
		t.Fatalf("swap on a missing item = %v, %v; want false, nil", ok, err)
	}
	if item := get(t, c, tasks.Name(), "nobody"); item != nil {
		t.Fatalf("the swap created %v", item)
	}
}

// TestCompareAndSwapOnAnAbsentAttributeAndRemove: Eq(attr, nil) expects
// the attribute to be absent; Set(attr, nil) removes it. Names that are
// DynamoDB reserved words or hold dots and spaces are placeholders, used
// as they are.
func TestCompareAndSwapOnAnAbsentAttributeAndRemove(t *testing.T) {
	c := client(t)
	tasks := dynamo.NewTable(c, itemTable(t, c), "id")
	put(t, c, tasks.Name(), map[string]types.AttributeValue{"id": s("t"), "status": s("open"), "a.b c": s("x")})
	ok, err := tasks.CompareAndSwap(t.Context(), dynamo.Key{"t"}, []dynamo.Pair{dynamo.Eq("owner", nil), dynamo.Eq("a.b c", "x")},
		dynamo.Set("owner", "me"), dynamo.Set("status", nil))
	if !ok || err != nil {
		t.Fatalf("first swap = %v, %v", ok, err)
	}
	item := get(t, c, tasks.Name(), "t")
	if str(item, "owner") != "me" || item["status"] != nil || str(item, "a.b c") != "x" {
		t.Fatalf("item after the swap: %v", item)
	}
	ok, err = tasks.CompareAndSwap(t.Context(), dynamo.Key{"t"}, []dynamo.Pair{dynamo.Eq("owner", nil)}, dynamo.Set("owner", "other"))
	if ok || err != nil {
		t.Fatalf("second swap = %v, %v; want false, nil", ok, err)
	}
}

// TestCompareAndSwapRefusesBadInputAndSendsNothing: no expectation, no
// assignment, an empty or repeated attribute, an assignment to the key, a
// key of the wrong shape, a nil client: each an error matching
// sqlock.ErrInvalidArgument (or ErrNilHandle), and the item unchanged.
func TestCompareAndSwapRefusesBadInputAndSendsNothing(t *testing.T) {
	c := client(t)
	tasks := dynamo.NewTable(c, itemTable(t, c), "id")
	put(t, c, tasks.Name(), map[string]types.AttributeValue{"id": s("t"), "status": s("open")})
	eq := []dynamo.Pair{dynamo.Eq("status", "open")}
	set := dynamo.Set("status", "claimed")
	cases := []struct {
		name   string
		key    dynamo.Key
		expect []dynamo.Pair
		set    []dynamo.Pair
	}{
		{"no expectation", dynamo.Key{"t"}, nil, []dynamo.Pair{set}},
		{"no assignment", dynamo.Key{"t"}, eq, nil},
		{"empty attribute", dynamo.Key{"t"}, eq, []dynamo.Pair{dynamo.Set("", 1)}},
		{"attribute twice", dynamo.Key{"t"}, eq, []dynamo.Pair{set, dynamo.Set("status", "x")}},
		{"the key", dynamo.Key{"t"}, eq, []dynamo.Pair{dynamo.Set("id", "u")}},
		{"key too long", dynamo.Key{"t", "u"}, eq, []dynamo.Pair{set}},
		{"key not a scalar", dynamo.Key{[]string{"t"}}, eq, []dynamo.Pair{set}},
		{"unmarshallable value", dynamo.Key{"t"}, eq, []dynamo.Pair{dynamo.Set("f", func() {})}},
	}
	for _, tc := range cases {
		ok, err := tasks.CompareAndSwap(t.Context(), tc.key, tc.expect, tc.set...)
		if ok || !errors.Is(err, sqlock.ErrInvalidArgument) || !errors.Is(err, dynamo.ErrInvalid) {
			t.Errorf("%s: %v, %v; want ErrInvalidArgument", tc.name, ok, err)
		}
	}
	if _, err := dynamo.NewTable(nil, "x", "id").CompareAndSwap(t.Context(), dynamo.Key{"t"}, eq, set); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil client: %v", err)
	}
	if str(get(t, c, tasks.Name(), "t"), "status") != "open" {
		t.Fatal("a refused swap changed the item")
	}
}
