package dynamo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/dynamo"
	"github.com/sqlock/sqlock/dynamo/internal/dynamotest"
	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// matrixTTL outlasts any operation of a cell and any fault's holder that
// is not meant to expire; shortTTL is a holder's whose expiry is the fault
// (a waiter takes over once it has watched the lock unchanged for it).
const (
	matrixTTL = 30 * time.Second
	shortTTL  = 500 * time.Millisecond
)

// TestMatrix is the dynamo module's part of make matrix
// (internal/testing/matrix), on the test binary's dynalite server: the
// conditional write (CompareAndSwap on the item's quantity, the workload's
// state kept in DynamoDB) and the lock (its token fencing the workload's
// write in PostgreSQL), on the grid MATRIX names, and the faults of issue
// 37 they meet: the lock's holder partitioned from DynamoDB by a proxy, and
// the holder, a real OS process, stopped with SIGSTOP past its TTL, fenced
// and not; for the swap, the writer partitioned between its read and its
// write.
func TestMatrix(t *testing.T) {
	if served, err := matrix.ServePausedHolder(openHolder); served {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	srv := dynamotest.Shared(t)
	locks := lockTable(t, srv.Client(nil))
	matrix.Run(t,
		matrix.Row{Mechanism: "dynamo CAS", Group: "optimistic", Workloads: matrix.Workloads,
			Open: casOpen(srv), Check: casCheck(srv),
			Faults: []matrix.Fault{
				{Name: "partitioned by proxy", Expect: matrix.Safe, Run: casPartitioned(srv)},
			}},
		matrix.Row{Mechanism: "dynamo lock", Group: "lock", Workloads: matrix.Workloads,
			Open: lockOpen(srv, locks, true),
			Faults: []matrix.Fault{
				{Name: "partitioned by proxy", Expect: matrix.Safe, Run: lockPartitioned(srv, locks)},
				{Name: "holder paused past TTL (fenced)", Expect: matrix.Safe, Run: pausedFault(srv, locks, true)},
			}},
		matrix.Row{Mechanism: "dynamo lock (unfenced)", Group: "lock",
			Open: lockOpen(srv, locks, false),
			Faults: []matrix.Fault{
				{Name: "holder paused past TTL (unfenced)", Expect: matrix.Unsafe, Run: pausedFault(srv, locks, false)},
			}},
	)
}

// countOn makes a client count every request it sends (each attempt of
// the SDK's retryer) on rt, with the SDK's own extension point: a
// middleware of the finalize step.
func countOn(rt *matrix.RoundTrips) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("matrix", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				rt.Add(1)
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
		})
	}
}

// through is a client option that sends every request to endpoint (a
// proxy) instead of the server's.
func through(endpoint string) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) }
}

func options(fs ...func(*dynamodb.Options)) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		for _, f := range fs {
			f(o)
		}
	}
}

// casTable is the DynamoDB table of a cell's items: the State's keys and
// quantities, seeded from PostgreSQL, written by the swaps.
func casTable(c *matrix.Cell) string { return "matrix-" + c.State.Schema }

// casOpen is the swap row's Open: the cell's items copied into a table of
// their own (not counted: before the load), then every contender's
// operation is casOp on a counted client.
func casOpen(srv *dynamotest.Server) func(context.Context, *matrix.Cell) ([]matrix.Actor, func(), error) {
	return func(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
		if err := seed(ctx, srv.Client(nil), c); err != nil {
			return nil, nil, err
		}
		cl := srv.Client(countOn(c.RoundTrips))
		tbl := dynamo.NewTable(cl, casTable(c), "key")
		actors := make([]matrix.Actor, c.Contenders)
		for i := range actors {
			actors[i] = matrix.ActorFunc(func(ctx context.Context, key string) (matrix.Result, error) {
				return casOp(ctx, c, cl, tbl, key, nil)
			})
		}
		return actors, nil, nil
	}
}

// seed creates c's table and writes every item of c's State into it, 25
// to a request, from 8 goroutines; the table is deleted when c's test
// ends.
func seed(ctx context.Context, cl *dynamodb.Client, c *matrix.Cell) error {
	name := casTable(c)
	_, err := cl.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("key"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("key"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return err
	}
	c.T.Cleanup(func() {
		cl.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	if err := dynamotest.WaitActive(ctx, cl, name); err != nil {
		return err
	}
	rows, err := c.DB.QueryContext(ctx, "SELECT key, qty FROM "+c.State.Items)
	if err != nil {
		return err
	}
	var batches [][]types.WriteRequest
	var batch []types.WriteRequest
	for rows.Next() {
		var key string
		var qty int64
		if err := rows.Scan(&key, &qty); err != nil {
			rows.Close()
			return err
		}
		batch = append(batch, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			"key": &types.AttributeValueMemberS{Value: key}, "qty": &types.AttributeValueMemberN{Value: strconv.FormatInt(qty, 10)}}}})
		if len(batch) == 25 {
			batches, batch = append(batches, batch), nil
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		batches = append(batches, batch)
	}
	work := make(chan []types.WriteRequest)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for b := range work {
				for len(b) > 0 {
					out, err := cl.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{name: b}})
					if err != nil {
						errs <- err
						return
					}
					b = out.UnprocessedItems[name]
				}
			}
		})
	}
	for _, b := range batches {
		select {
		case work <- b:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// casOp is one operation as the conditional write makes it: a consistent
// read of the item's quantity, refused at 0, then CompareAndSwap of the
// quantity read for one less, read again when another swap won; the event
// recorded in PostgreSQL after the swap that won. between, when not nil,
// runs between each read and its swap (a fault's lever).
func casOp(ctx context.Context, c *matrix.Cell, cl *dynamodb.Client, tbl *dynamo.Table, key string, between func()) (matrix.Result, error) {
	for {
		out, err := cl.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tbl.Name()), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: key}}})
		if err != nil {
			return 0, err
		}
		qty, err := quantity(out.Item)
		if err != nil {
			return 0, err
		}
		it := matrix.Item{Key: key, Qty: qty}
		next, ok := it.Next()
		if !ok {
			return matrix.Refused, nil
		}
		if between != nil {
			between()
		}
		won, err := tbl.CompareAndSwap(ctx, dynamo.Key{key}, []dynamo.Pair{dynamo.Eq("qty", qty)}, dynamo.Set("qty", next))
		if err != nil {
			return 0, err
		}
		if won {
			return matrix.Done, c.State.Record(ctx, c.DB, key, 0)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

func quantity(item map[string]types.AttributeValue) (int64, error) {
	v, ok := item["qty"].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("item %v has no quantity", item)
	}
	return strconv.ParseInt(v.Value, 10, 64)
}

// casCheck is the swap row's Check: the quantities DynamoDB ended with
// copied into the State's items, then the workload's own check (a double
// charge, an oversold seat, a decrement the quantity does not show).
func casCheck(srv *dynamotest.Server) func(context.Context, *matrix.Cell) (int, string, error) {
	return func(ctx context.Context, c *matrix.Cell) (int, string, error) {
		cl := srv.Client(nil)
		var keys []string
		var qtys []int64
		p := dynamodb.NewScanPaginator(cl, &dynamodb.ScanInput{TableName: aws.String(casTable(c)), ConsistentRead: aws.Bool(true)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return 0, "", err
			}
			for _, item := range page.Items {
				k, _ := item["key"].(*types.AttributeValueMemberS)
				qty, err := quantity(item)
				if err != nil || k == nil {
					return 0, "", fmt.Errorf("item %v: %v", item, err)
				}
				keys, qtys = append(keys, k.Value), append(qtys, qty)
			}
		}
		if _, err := c.DB.ExecContext(ctx, "UPDATE "+c.State.Items+
			" i SET qty = v.qty FROM unnest($1::text[], $2::bigint[]) v(key, qty) WHERE i.key = v.key", keys, qtys); err != nil {
			return 0, "", err
		}
		return c.State.Check(ctx)
	}
}

// casPartitioned: writer A's client reaches the server through a proxy.
// A reads an order (unpaid); the proxy stalls, and A's swap waits in it;
// B, on a client of its own, charges the order; the partition heals and
// A's swap reaches the server after B's: refused by its condition, A reads
// again and finds the order charged.
func casPartitioned(srv *dynamotest.Server) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 2, matrix.HotKey, 1)
		if err != nil {
			return err
		}
		if err := seed(ctx, srv.Client(nil), c); err != nil {
			return err
		}
		p := pgtest.StartTCPProxy(f.T, strings.TrimPrefix(srv.Endpoint, "http://"))
		acl := srv.Client(options(countOn(c.RoundTrips), through("http://"+p.Addr())))
		bcl := srv.Client(countOn(c.RoundTrips))
		key := c.State.Key(0)
		read := make(chan struct{})
		var once sync.Once
		a := matrix.ActorFunc(func(ctx context.Context, key string) (matrix.Result, error) {
			return casOp(ctx, c, acl, dynamo.NewTable(acl, casTable(c), "key"), key, func() {
				once.Do(func() {
					p.Stall()
					close(read)
				})
			})
		})
		done := make(chan struct{})
		var ar matrix.Result
		var aerr error
		go func() {
			defer close(done)
			ar, aerr = f.Do(ctx, a, key)
		}()
		select {
		case <-read:
		case <-done:
			return errors.New("writer A ended before its swap")
		}
		_, berr := f.Do(ctx, matrix.ActorFunc(func(ctx context.Context, key string) (matrix.Result, error) {
			return casOp(ctx, c, bcl, dynamo.NewTable(bcl, casTable(c), "key"), key, nil)
		}), key)
		p.Resume()
		<-done
		outcome := "charged the order"
		if ar == matrix.Refused {
			outcome = "found the order charged"
		}
		f.Note("A's client through a proxy, stalled between A's read and its swap; B charged the order (%s); the partition healed, A's swap lost and A, reading again, %s (%s)",
			matrix.Outcome(berr), outcome, matrix.Outcome(aerr))
		return nil
	}
}

// lockOpen is the lock row's Open: every contender's operation is guarded
// by a lock of the table locks, fenced with its token or not.
func lockOpen(srv *dynamotest.Server, locks string, fenced bool) func(context.Context, *matrix.Cell) ([]matrix.Actor, func(), error) {
	return func(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
		acq := locker(srv.Client(countOn(c.RoundTrips)), locks, matrixTTL)
		actors := make([]matrix.Actor, c.Contenders)
		for i := range actors {
			actors[i] = matrix.Guarded(c, c.DB, acq, fenced)
		}
		return actors, nil, nil
	}
}

func locker(cl *dynamodb.Client, locks string, ttl time.Duration) sqlock.Acquirer {
	return dynamo.NewLocker(cl, locks, dynamo.WithTimeout(time.Minute)).Acquirer(ttl)
}

// lockPartitioned: holder A's client reaches the server through a proxy.
// A holds an order's lock (a short TTL) and has read the order; the proxy
// stalls, so A's renewals stop. B, having watched the lock unchanged for
// A's TTL, takes it over with a greater token and charges the order; the
// partition heals; A's write, fenced, is refused by PostgreSQL. A is the
// fault, not one of its operations: what it did is in the note.
func lockPartitioned(srv *dynamotest.Server, locks string) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 2, matrix.HotKey, 1)
		if err != nil {
			return err
		}
		p := pgtest.StartTCPProxy(f.T, strings.TrimPrefix(srv.Endpoint, "http://"))
		a := func(q matrix.Querier) matrix.Actor {
			return matrix.Guarded(c, q, locker(srv.Client(options(countOn(c.RoundTrips), through("http://"+p.Addr()))), locks, shortTTL), true)
		}
		b := matrix.Guarded(c, c.DB, locker(srv.Client(countOn(c.RoundTrips)), locks, matrixTTL), true)
		return f.Partitioned(ctx, c, p, a, b,
			fmt.Sprintf("A's client through a proxy, stalled while A held the order's lock (TTL %v) and had read it", shortTTL),
			"B, once it had watched the lock unchanged for the TTL")
	}
}

// holderConfig is what the paused holder, the test binary run again, is
// told: the server and lock table, the cell's database and tables, the
// pausedFault: matrix.PausedHolder on the locks table of srv, B taking
// the lock over once it has watched A's unchanged for A's TTL.
func pausedFault(srv *dynamotest.Server, locks string, fenced bool) func(context.Context, *matrix.FaultRun) error {
	return func(ctx context.Context, f *matrix.FaultRun) error {
		c, err := f.NewCell(ctx, pgtest.New(f.T).DSN, 1, matrix.HotKey, 1)
		if err != nil {
			return err
		}
		backend, err := json.Marshal(holderBackend{srv.Endpoint, locks})
		if err != nil {
			return err
		}
		b := matrix.Guarded(c, c.DB, locker(srv.Client(countOn(c.RoundTrips)), locks, matrixTTL), fenced)
		return f.PausedHolder(ctx, c, matrix.HolderSpec{TTL: shortTTL, Fenced: fenced, Backend: backend}, b)
	}
}

// holderBackend is where the paused holder's lock is: the server and the
// locks table.
type holderBackend struct{ Endpoint, Locks string }

// openHolder is the paused holder's lock, on the table spec.Backend names.
func openHolder(_ context.Context, spec matrix.HolderSpec) (sqlock.Acquirer, func(), error) {
	var b holderBackend
	if err := json.Unmarshal(spec.Backend, &b); err != nil {
		return nil, nil, err
	}
	return dynamo.NewLocker(dynamodb.New(dynamotest.ClientOptions(b.Endpoint)), b.Locks).Acquirer(spec.TTL), nil, nil
}
