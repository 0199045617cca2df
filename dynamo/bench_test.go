package dynamo_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqlock/sqlock/dynamo"
	"github.com/sqlock/sqlock/dynamo/internal/dynamotest"
)

// counter counts the requests a client sends (each attempt of the SDK's
// retryer is one).
type counter struct{ n atomic.Int64 }

func (c *counter) apply(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("count", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			c.n.Add(1)
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
	})
}

// requests runs fn and returns how many requests it sent.
func (c *counter) requests(fn func()) int64 {
	before := c.n.Load()
	fn()
	return c.n.Load() - before
}

// TestEachOperationIsOneRequest: a swap (won or lost), a versioned Update
// and Put, a fenced write, an acquisition of a free lock, a renewal and a
// Release each send exactly one request; a refused versioned write sends
// two on dynalite (the refusal carries no item, so a read tells stale from
// gone).
func TestEachOperationIsOneRequest(t *testing.T) {
	var cnt counter
	c := dynamotest.Shared(t).Client(cnt.apply)
	tbl := dynamo.NewTable(c, itemTable(t, c), "id")
	put(t, c, tbl.Name(), map[string]types.AttributeValue{"id": s("t"), "status": s("open"), "version": n("1")})
	ctx := t.Context()
	one := func(what string, want int64, fn func() error) {
		t.Helper()
		var err error
		if got := cnt.requests(func() { err = fn() }); got != want {
			t.Errorf("%s: %d requests, want %d", what, got, want)
		}
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	cas := func(want bool) func() error {
		return func() error {
			ok, err := tbl.CompareAndSwap(ctx, dynamo.Key{"t"}, []dynamo.Pair{dynamo.Eq("status", "open")}, dynamo.Set("status", "claimed"))
			if err == nil && ok != want {
				err = errors.New("unexpected outcome")
			}
			return err
		}
	}
	one("winning swap", 1, cas(true))
	one("losing swap", 1, cas(false))
	one("versioned update", 1, func() error { _, err := tbl.Update(ctx, dynamo.Key{"t"}, 1, dynamo.Set("a", 1)); return err })
	one("stale update", 2, func() error {
		_, err := tbl.Update(ctx, dynamo.Key{"t"}, 1, dynamo.Set("a", 2))
		if err == nil {
			return errors.New("not stale")
		}
		return nil
	})
	o := order{ID: "o"}
	one("versioned put", 1, func() error { return tbl.Put(ctx, &o) })

	locks := dynamo.NewLocker(c, lockTable(t, c))
	var l *dynamo.Lock
	one("acquire of a free lock", 1, func() error { var err error; l, err = locks.Acquire(ctx, "job", 600*time.Millisecond); return err })
	lctx, cancel := l.Context(ctx)
	defer cancel()
	one("fenced update", 1, func() error { return tbl.UpdateFenced(lctx, dynamo.Key{"t"}, dynamo.Set("b", 1)) })
	before := cnt.n.Load()
	for deadline := l.Deadline(); !l.Deadline().After(deadline); {
		time.Sleep(10 * time.Millisecond) // until one renewal has been confirmed
	}
	if got := cnt.n.Load() - before; got < 1 {
		t.Errorf("a renewal moved the deadline after %d requests", got)
	}
	one("release", 1, func() error { return l.Release(ctx) })
}

// The benchmarks run each form beside the same request written by hand
// with the SDK, in the same run: make bench-report reads the ratios.

func benchTable(b *testing.B) (*dynamodb.Client, *dynamo.Table) {
	c := client(b)
	tbl := dynamo.NewTable(c, itemTable(b, c), "id")
	put(b, c, tbl.Name(), map[string]types.AttributeValue{"id": s("t"), "version": n("1")})
	return c, tbl
}

func BenchmarkVersionedUpdate(b *testing.B) {
	_, tbl := benchTable(b)
	v := int64(1)
	for b.Loop() {
		var err error
		if v, err = tbl.Update(b.Context(), dynamo.Key{"t"}, v, dynamo.Set("status", "x")); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVersionedUpdateByHand(b *testing.B) {
	c, tbl := benchTable(b)
	v := int64(1)
	for b.Loop() {
		_, err := c.UpdateItem(b.Context(), &dynamodb.UpdateItemInput{
			TableName:                aws.String(tbl.Name()),
			Key:                      map[string]types.AttributeValue{"id": s("t")},
			UpdateExpression:         aws.String("SET #s = :s, #v = :next"),
			ConditionExpression:      aws.String("#v = :v"),
			ExpressionAttributeNames: map[string]string{"#s": "status", "#v": "version"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": s("x"),
				":v": n(strconv.FormatInt(v, 10)), ":next": n(strconv.FormatInt(v+1, 10))},
		})
		if err != nil {
			b.Fatal(err)
		}
		v++
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	c := client(b)
	locks := dynamo.NewLocker(c, lockTable(b, c))
	for b.Loop() {
		l, err := locks.Acquire(b.Context(), "job", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAcquireReleaseByHand(b *testing.B) {
	c := client(b)
	table := lockTable(b, c)
	key := map[string]types.AttributeValue{dynamo.AttrName: s("job")}
	names := map[string]string{"#o": dynamo.AttrOwner, "#r": dynamo.AttrRV, "#l": dynamo.AttrLease, "#f": dynamo.AttrFence}
	for b.Loop() {
		_, err := c.UpdateItem(b.Context(), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key,
			UpdateExpression:          aws.String("SET #o = :o, #r = :r, #l = :l ADD #f :one"),
			ConditionExpression:       aws.String("attribute_not_exists(#o)"),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: map[string]types.AttributeValue{":o": s("me"), ":r": s("r"), ":l": n("60000"), ":one": n("1")},
			ReturnValues:              types.ReturnValueUpdatedNew,
		})
		if err != nil {
			b.Fatal(err)
		}
		_, err = c.UpdateItem(b.Context(), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key,
			UpdateExpression:          aws.String("REMOVE #o, #r, #l"),
			ConditionExpression:       aws.String("#o = :o AND #r = :r"),
			ExpressionAttributeNames:  map[string]string{"#o": dynamo.AttrOwner, "#r": dynamo.AttrRV, "#l": dynamo.AttrLease},
			ExpressionAttributeValues: map[string]types.AttributeValue{":o": s("me"), ":r": s("r")},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
