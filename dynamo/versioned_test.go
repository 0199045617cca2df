package dynamo_test

import (
	"context"
	"errors"
	"flag"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/dynamo"
	"github.com/sqlock/sqlock/dynamo/internal/dynamotest"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

// increments is how many versioned Updates each of the 32 goroutines of
// TestVersionedIncrementsLoseNone makes. dynalite serves one item's writes
// one at a time, some 20 ms each on a loaded machine, so the default (10) keeps
// the test to well under a minute; -increments=300 runs the figure.
var increments = flag.Int("increments", 10, "versioned Updates per goroutine in TestVersionedIncrementsLoseNone")

// TestVersionedIncrementsLoseNone: 32 goroutines each make -increments versioned
// Updates of the same item, each retried by package retry on
// versioned.ErrStale from the version the refusal reported: every Update
// that succeeded wrote a distinct version (two successes from one expected
// version would be a lost update), the versions written are exactly 2 …
// 32×increments+1, and the item ends there with the last writer's values.
func TestVersionedIncrementsLoseNone(t *testing.T) {
	c := client(t)
	tbl := dynamo.NewTable(c, itemTable(t, c), "id")
	put(t, c, tbl.Name(), map[string]types.AttributeValue{"id": s("counter"), "version": n("1")})
	workers, each := 32, *increments
	var stale atomic.Int64
	written := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			v := int64(1)
			for range each {
				err := retry.Do(t.Context(), func(ctx context.Context) error {
					next, err := tbl.Update(ctx, dynamo.Key{"counter"}, v, dynamo.Set("writer", w))
					var se *versioned.StaleError
					if errors.As(err, &se) {
						stale.Add(1)
						v = se.Current
						return err
					}
					if err == nil {
						written[w] = append(written[w], next)
						v = next
					}
					return err
				}, retry.WithMaxAttempts(1_000_000), retry.WithBackoff(retry.Exponential(time.Millisecond, 50*time.Millisecond)))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	seen := make(map[int64]int)
	var last int64
	lastWriter := -1
	for w, vs := range written {
		for _, v := range vs {
			if prev, dup := seen[v]; dup {
				t.Fatalf("version %d written by workers %d and %d: a lost update", v, prev, w)
			}
			seen[v] = w
			if v > last {
				last, lastWriter = v, w
			}
		}
	}
	total := workers * each
	if len(seen) != total || last != int64(total)+1 {
		t.Fatalf("%d distinct versions written, the highest %d; want %d, up to %d", len(seen), last, total, total+1)
	}
	item := get(t, c, tbl.Name(), "counter")
	if num(item, "version") != strconv.Itoa(total+1) || num(item, "writer") != strconv.Itoa(lastWriter) {
		t.Fatalf("item %v; want version %d by writer %d", item, total+1, lastWriter)
	}
	t.Logf("%d stale attempts retried", stale.Load())
}

// TestStaleUpdateTellsChangedFromMissing: an Update at an old version is a
// *versioned.StaleError with the item's current version; on a missing item
// it says Gone; neither changes anything. A Delete at the right version
// deletes, at a wrong one is stale.
func TestStaleUpdateTellsChangedFromMissing(t *testing.T) {
	c := client(t)
	tbl := dynamo.NewTable(c, itemTable(t, c), "id")
	put(t, c, tbl.Name(), map[string]types.AttributeValue{"id": s("o"), "status": s("new"), "version": n("3")})
	v, err := tbl.Update(t.Context(), dynamo.Key{"o"}, 3, dynamo.Set("status", "paid"))
	if err != nil || v != 4 {
		t.Fatalf("Update = %d, %v; want 4", v, err)
	}
	_, err = tbl.Update(t.Context(), dynamo.Key{"o"}, 3, dynamo.Set("status", "refunded"))
	var se *versioned.StaleError
	if !errors.As(err, &se) || !errors.Is(err, versioned.ErrStale) || !se.Probed || se.Gone || se.Current != 4 || se.Expected != 3 || se.Op != "update" {
		t.Fatalf("stale Update: %#v", err)
	}
	_, err = tbl.Update(t.Context(), dynamo.Key{"nobody"}, 1, dynamo.Set("status", "paid"))
	if !errors.As(err, &se) || !se.Gone {
		t.Fatalf("Update of a missing item: %v", err)
	}
	if get(t, c, tbl.Name(), "nobody") != nil {
		t.Fatal("an Update of a missing item created it")
	}
	if err := tbl.Delete(t.Context(), dynamo.Key{"o"}, 3); !errors.As(err, &se) || se.Current != 4 || se.Op != "delete" {
		t.Fatalf("stale Delete: %v", err)
	}
	if str(get(t, c, tbl.Name(), "o"), "status") != "paid" {
		t.Fatal("a stale write changed the item")
	}
	if err := tbl.Delete(t.Context(), dynamo.Key{"o"}, 4); err != nil {
		t.Fatal(err)
	}
	if get(t, c, tbl.Name(), "o") != nil {
		t.Fatal("the item is still there after Delete")
	}
	if err := tbl.Delete(t.Context(), dynamo.Key{"o"}, 4); !errors.As(err, &se) || !se.Gone {
		t.Fatalf("Delete of a deleted item: %v", err)
	}
}

// TestVersionedUpdateRefusesBadInput: an assignment to the version or the
// key, or nothing to set, matches sqlock.ErrInvalidArgument; the next
// version past MaxInt64 is versioned.ErrOverflow; nothing changes.
func TestVersionedUpdateRefusesBadInput(t *testing.T) {
	c := client(t)
	tbl := dynamo.NewTable(c, itemTable(t, c), "id")
	put(t, c, tbl.Name(), map[string]types.AttributeValue{"id": s("o"), "version": n("1")})
	for _, set := range [][]dynamo.Pair{nil, {dynamo.Set("version", 7)}, {dynamo.Set("id", "p")}, {dynamo.Set("fence", 7)}} {
		if _, err := tbl.Update(t.Context(), dynamo.Key{"o"}, 1, set...); !errors.Is(err, sqlock.ErrInvalidArgument) {
			t.Errorf("set %v: %v", set, err)
		}
	}
	if _, err := tbl.Update(t.Context(), dynamo.Key{"o"}, 1<<63-1, dynamo.Set("a", 1)); !errors.Is(err, versioned.ErrOverflow) {
		t.Errorf("overflow: %v", err)
	}
	if num(get(t, c, tbl.Name(), "o"), "version") != "1" {
		t.Fatal("a refused write changed the item")
	}
}

// order is a versioned struct as attributevalue marshals it.
type order struct {
	ID      string `dynamodbav:"id"`
	Status  string `dynamodbav:"status"`
	Version int64  `dynamodbav:"ver" lock:"version"`
}

// TestPutOfAVersionedStruct: a struct with a lock:"version" field at 0 is
// created at version 1 and refused when the key is taken; at n it replaces
// an item at n and becomes n+1; a stale one is refused with the item's
// version and keeps its field.
func TestPutOfAVersionedStruct(t *testing.T) {
	c := client(t)
	tbl := dynamo.NewTable(c, itemTable(t, c), "id")
	o := order{ID: "o1", Status: "new"}
	if err := tbl.Put(t.Context(), &o); err != nil || o.Version != 1 {
		t.Fatalf("create: %v, version %d", err, o.Version)
	}
	dup := order{ID: "o1", Status: "dup"}
	var se *versioned.StaleError
	if err := tbl.Put(t.Context(), &dup); !errors.As(err, &se) || se.Gone || se.Current != 1 || dup.Version != 0 {
		t.Fatalf("create of a taken key: %v (version %d)", err, dup.Version)
	}
	old := o
	o.Status = "paid"
	if err := tbl.Put(t.Context(), &o); err != nil || o.Version != 2 {
		t.Fatalf("update: %v, version %d", err, o.Version)
	}
	old.Status = "cancelled"
	if err := tbl.Put(t.Context(), &old); !errors.As(err, &se) || se.Current != 2 || se.Expected != 1 || old.Version != 1 {
		t.Fatalf("stale put: %v (version %d)", err, old.Version)
	}
	item := get(t, c, tbl.Name(), "o1")
	if str(item, "status") != "paid" || num(item, "ver") != "2" {
		t.Fatalf("item %v", item)
	}
	gone := order{ID: "o2", Status: "x", Version: 5}
	if err := tbl.Put(t.Context(), &gone); !errors.As(err, &se) || !se.Gone {
		t.Fatalf("put of a missing item at version 5: %v", err)
	}
	for _, bad := range []any{order{ID: "o3"}, (*order)(nil), &struct{ ID string }{"o4"}} {
		if err := tbl.Put(t.Context(), bad); !errors.Is(err, sqlock.ErrInvalidArgument) {
			t.Errorf("Put(%T): %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// attachItem makes a client behave as DynamoDB does where dynalite does
// not: a conditional write refused after asking for
// ReturnValuesOnConditionCheckFailure ALL_OLD gets the item, read by
// reader (a client of its own, whose requests the tested client's counter
// does not see), attached to its ConditionalCheckFailedException — if the
// item exists, as DynamoDB attaches none for a missing one.
func attachItem(reader *dynamodb.Client) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("attach-item", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				var ccf *types.ConditionalCheckFailedException
				if !errors.As(err, &ccf) || ccf.Item != nil {
					return out, md, err
				}
				var table *string
				var key map[string]types.AttributeValue
				switch p := in.Parameters.(type) {
				case *dynamodb.UpdateItemInput:
					if p.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld {
						table, key = p.TableName, p.Key
					}
				case *dynamodb.DeleteItemInput:
					if p.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld {
						table, key = p.TableName, p.Key
					}
				}
				if key != nil {
					got, gerr := reader.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key, ConsistentRead: aws.Bool(true)})
					if gerr != nil {
						return out, md, gerr
					}
					ccf.Item = got.Item
				}
				return out, md, err
			}), middleware.Before)
		})
	}
}

// TestRefusalWithTheItemAttachedNeedsNoRead: on a server that attaches
// the item to a refused condition (DynamoDB; simulated here, see
// attachItem), a stale Update or Delete and a refused fenced write each
// send one request and still say what the item holds; a missing item, to
// which nothing is attached, is told by the fallback read (two requests),
// as every refusal is on dynalite (TestEachOperationIsOneRequest).
func TestRefusalWithTheItemAttachedNeedsNoRead(t *testing.T) {
	srv := dynamotest.Shared(t)
	var cnt counter
	c := srv.Client(func(o *dynamodb.Options) {
		attachItem(srv.Client(nil))(o)
		cnt.apply(o)
	})
	tbl := dynamo.NewTable(c, itemTable(t, c), "id")
	put(t, c, tbl.Name(), map[string]types.AttributeValue{"id": s("o"), "version": n("5"), "fence": n("9")})
	ctx := t.Context()
	var se *versioned.StaleError
	var err error
	if got := cnt.requests(func() { _, err = tbl.Update(ctx, dynamo.Key{"o"}, 4, dynamo.Set("a", 1)) }); got != 1 ||
		!errors.As(err, &se) || !se.Probed || se.Gone || se.Current != 5 {
		t.Errorf("stale Update: %v after %d requests; want Current 5 after 1", err, got)
	}
	if got := cnt.requests(func() { err = tbl.Delete(ctx, dynamo.Key{"o"}, 4) }); got != 1 || !errors.As(err, &se) || se.Current != 5 {
		t.Errorf("stale Delete: %v after %d requests; want Current 5 after 1", err, got)
	}
	var fe *versioned.FencedError
	fctx := sqlock.WithFencingToken(ctx, 8)
	if got := cnt.requests(func() { err = tbl.UpdateFenced(fctx, dynamo.Key{"o"}, dynamo.Set("a", 1)) }); got != 1 || !errors.As(err, &fe) || fe.Current != 9 {
		t.Errorf("fenced write under an older token: %v after %d requests; want Current 9 after 1", err, got)
	}
	if got := cnt.requests(func() { _, err = tbl.Update(ctx, dynamo.Key{"nobody"}, 1, dynamo.Set("a", 1)) }); got != 2 || !errors.As(err, &se) || !se.Gone {
		t.Errorf("Update of a missing item: %v after %d requests; want Gone after 2", err, got)
	}
	if item := get(t, c, tbl.Name(), "o"); num(item, "version") != "5" || item["a"] != nil {
		t.Fatalf("a refused write changed the item: %v", item)
	}
}
