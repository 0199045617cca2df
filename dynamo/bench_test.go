package dynamo_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
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
	wctx := testCtx(t)
	for deadline := l.Deadline(); !l.Deadline().After(deadline); { // until one renewal has been confirmed
		select {
		case <-wctx.Done():
			t.Fatalf("no renewal confirmed before the test's deadline (lock: %v)", l.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got := cnt.n.Load() - before; got < 1 {
		t.Errorf("a renewal moved the deadline after %d requests", got)
	}
	one("release", 1, func() error { return l.Release(ctx) })
}

// BenchmarkBesideByHand runs each form of the package beside the same
// requests written by hand with the SDK, interleaved operation by
// operation on one client of the shared server, so that both arms see the
// same server and the same load. It reports each arm's median time per
// operation (form-p50-ns/op, hand-p50-ns/op), the throughput ratio (ratio:
// the hand median over the form's, so ≥ 1 means the form is as fast) and
// each arm's requests per operation, counted by an SDK middleware
// (form-req/op, hand-req/op); it fails if the two arms' counts differ.
func BenchmarkBesideByHand(b *testing.B) {
	for _, f := range []struct {
		name string
		arms func(b *testing.B, c *dynamodb.Client) (form, hand func(ctx context.Context) error)
	}{
		{"CompareAndSwap", casArms},
		{"VersionedUpdate", updateArms},
		{"AcquireRelease", lockArms},
		{"UpdateFenced", fencedArms},
	} {
		b.Run(f.name, func(b *testing.B) {
			var cnt counter
			c := dynamotest.Shared(b).Client(cnt.apply)
			form, hand := f.arms(b, c)
			ctx := b.Context()
			var formT, handT []time.Duration // each operation's time
			var formN, handN int64
			run := func(arm func(context.Context) error, t *[]time.Duration, n *int64) {
				before := cnt.n.Load()
				start := time.Now()
				err := arm(ctx)
				*t = append(*t, time.Since(start))
				*n += cnt.n.Load() - before
				if err != nil {
					b.Fatal(err)
				}
			}
			// One untimed operation each first: the client's connections
			// and the server's tables are warm before either arm is timed.
			if err := form(ctx); err != nil {
				b.Fatal(err)
			}
			if err := hand(ctx); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				// Alternate which arm goes first, so that neither always
				// follows the other's request.
				if i%2 == 0 {
					run(form, &formT, &formN)
					run(hand, &handT, &handN)
				} else {
					run(hand, &handT, &handN)
					run(form, &formT, &formN)
				}
				i++
			}
			// Medians: on a shared machine a few operations stall for
			// tens of milliseconds, in either arm, and would decide a ratio
			// of means.
			fm, hm := median(formT), median(handT)
			ops := float64(i)
			b.ReportMetric(float64(fm.Nanoseconds()), "form-p50-ns/op")
			b.ReportMetric(float64(hm.Nanoseconds()), "hand-p50-ns/op")
			b.ReportMetric(float64(hm)/float64(fm), "ratio")
			b.ReportMetric(float64(formN)/ops, "form-req/op")
			b.ReportMetric(float64(handN)/ops, "hand-req/op")
			if formN != handN {
				b.Fatalf("%d requests by the form, %d by hand, in %d operations", formN, handN, i)
			}
		})
	}
}

// median is the middle of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// benchItems is an item table with an item for each arm.
func benchItems(b *testing.B, c *dynamodb.Client, item map[string]types.AttributeValue) *dynamo.Table {
	tbl := dynamo.NewTable(c, itemTable(b, c), "id")
	for _, id := range []string{"form", "hand"} {
		it := map[string]types.AttributeValue{"id": s(id)}
		for k, v := range item {
			it[k] = v
		}
		put(b, c, tbl.Name(), it)
	}
	return tbl
}

// casArms: a winning swap of the item's status, from one value to the
// other and back.
func casArms(b *testing.B, c *dynamodb.Client) (form, hand func(context.Context) error) {
	tbl := benchItems(b, c, map[string]types.AttributeValue{"status": s("a")})
	next := map[string]string{"a": "b", "b": "a"}
	formCur, handCur := "a", "a"
	form = func(ctx context.Context) error {
		ok, err := tbl.CompareAndSwap(ctx, dynamo.Key{"form"}, []dynamo.Pair{dynamo.Eq("status", formCur)}, dynamo.Set("status", next[formCur]))
		if err == nil && !ok {
			err = errors.New("the swap lost")
		}
		formCur = next[formCur]
		return err
	}
	hand = func(ctx context.Context) error {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(tbl.Name()),
			Key:                       map[string]types.AttributeValue{"id": s("hand")},
			UpdateExpression:          aws.String("SET #n1 = :v1"),
			ConditionExpression:       aws.String("(attribute_exists(#n0)) AND (#n1 = :v0)"),
			ExpressionAttributeNames:  map[string]string{"#n0": "id", "#n1": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v0": s(handCur), ":v1": s(next[handCur])},
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			err = errors.New("the swap lost")
		}
		handCur = next[handCur]
		return err
	}
	return form, hand
}

// updateArms: a versioned Update at the item's version.
func updateArms(b *testing.B, c *dynamodb.Client) (form, hand func(context.Context) error) {
	tbl := benchItems(b, c, map[string]types.AttributeValue{"version": n("1")})
	formV, handV := int64(1), int64(1)
	form = func(ctx context.Context) error {
		var err error
		formV, err = tbl.Update(ctx, dynamo.Key{"form"}, formV, dynamo.Set("status", "x"))
		return err
	}
	hand = func(ctx context.Context) error {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           aws.String(tbl.Name()),
			Key:                                 map[string]types.AttributeValue{"id": s("hand")},
			UpdateExpression:                    aws.String("SET #n1 = :v1, #n0 = :v2"),
			ConditionExpression:                 aws.String("#n0 = :v0"),
			ExpressionAttributeNames:            map[string]string{"#n0": "version", "#n1": "status"},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":v0": n(strconv.FormatInt(handV, 10)), ":v1": s("x"), ":v2": n(strconv.FormatInt(handV+1, 10))},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			handV++
		}
		return err
	}
	return form, hand
}

// lockArms: Acquire of a free lock, then its Release: the grant (owner,
// record version, lease, the fencing counter's increment, the new token
// read from the answer) and the owner-checked release. Each arm has a lock
// of its own.
func lockArms(b *testing.B, c *dynamodb.Client) (form, hand func(context.Context) error) {
	table := lockTable(b, c)
	locks := dynamo.NewLocker(c, table)
	form = func(ctx context.Context) error {
		l, err := locks.Acquire(ctx, "form", time.Minute)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	key := map[string]types.AttributeValue{dynamo.AttrName: s("hand")}
	hand = func(ctx context.Context) error {
		owner, rvn := randomID(), randomID()
		out, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key,
			UpdateExpression:         aws.String("SET #n0 = :v0, #n1 = :v1, #n2 = :v2 ADD #n3 :v3"),
			ConditionExpression:      aws.String("attribute_not_exists(#n0)"),
			ExpressionAttributeNames: map[string]string{"#n0": dynamo.AttrOwner, "#n1": dynamo.AttrRV, "#n2": dynamo.AttrLease, "#n3": dynamo.AttrFence},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v0": s(owner), ":v1": s(rvn), ":v2": n("60000"),
				":v3": n("1")},
			ReturnValues: types.ReturnValueUpdatedNew,
		})
		if err != nil {
			return err
		}
		if _, err := strconv.ParseInt(num(out.Attributes, dynamo.AttrFence), 10, 64); err != nil {
			return err
		}
		_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key,
			UpdateExpression:          aws.String("REMOVE #n0, #n1, #n2"),
			ConditionExpression:       aws.String("#n0 = :v0 AND #n1 = :v1"),
			ExpressionAttributeNames:  map[string]string{"#n0": dynamo.AttrOwner, "#n1": dynamo.AttrRV, "#n2": dynamo.AttrLease},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v0": s(owner), ":v1": s(rvn)},
		})
		return err
	}
	return form, hand
}

// fencedArms: a fenced write under a token, the item's fence at most it.
func fencedArms(b *testing.B, c *dynamodb.Client) (form, hand func(context.Context) error) {
	tbl := benchItems(b, c, nil)
	const token = 7
	form = func(ctx context.Context) error {
		return tbl.UpdateFenced(sqlock.WithFencingToken(ctx, token), dynamo.Key{"form"}, dynamo.Set("v", "x"))
	}
	hand = func(ctx context.Context) error {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           aws.String(tbl.Name()),
			Key:                                 map[string]types.AttributeValue{"id": s("hand")},
			UpdateExpression:                    aws.String("SET #n2 = :v1, #n1 = :v0"),
			ConditionExpression:                 aws.String("(attribute_exists(#n0)) AND (attribute_not_exists(#n1) OR #n1 <= :v0)"),
			ExpressionAttributeNames:            map[string]string{"#n0": "id", "#n1": "fence", "#n2": "v"},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":v0": n(strconv.Itoa(token)), ":v1": s("x")},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		return err
	}
	return form, hand
}

// randomID is 128 random bits as hex, as the Locker's owners and record
// versions are.
func randomID() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
