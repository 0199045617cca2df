package dynamo_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock/dynamo/internal/dynamotest"
)

func TestMain(m *testing.M) {
	if target := os.Getenv(childEnv); target != "" {
		os.Exit(runChild(target))
	}
	// The examples reach DYNAMODB_ENDPOINT, as a program would. The
	// server is gone with the test binary (its watchdog sees the pipe
	// close).
	if os.Getenv("DYNAMODB_ENDPOINT") == "" {
		s, err := dynamotest.Start(context.Background(), dynamotest.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		exampleServer = s
		os.Setenv("DYNAMODB_ENDPOINT", s.Endpoint)
	}
	os.Exit(m.Run())
}

// exampleServer keeps the examples' server reachable: a Server that is
// garbage collected closes its watchdog's pipe, which stops it.
var exampleServer *dynamotest.Server

// testCtx is t's context, ended 5 s before t's deadline: a test waits on
// it, then fails saying what never happened, rather than wait for ever.
func testCtx(t testing.TB) context.Context {
	ctx := t.Context()
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := dt.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
			t.Cleanup(cancel)
		}
	}
	return ctx
}

// client is a client of the binary's shared dynalite server.
func client(t testing.TB) *dynamodb.Client {
	t.Helper()
	return dynamotest.Shared(t).Client(nil)
}

// itemTable creates a table of its own for t, keyed by the string "id".
func itemTable(t testing.TB, c *dynamodb.Client) string {
	t.Helper()
	name := dynamotest.Table(t)
	_, err := c.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := dynamotest.WaitActive(context.Background(), c, name); err != nil {
		t.Fatal(err)
	}
	return name
}

// get reads the item with id, consistently; nil if none.
func get(t testing.TB, c *dynamodb.Client, table, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func put(t testing.TB, c *dynamodb.Client, table string, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatal(err)
	}
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

func str(item map[string]types.AttributeValue, attr string) string {
	if v, ok := item[attr].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func num(item map[string]types.AttributeValue, attr string) string {
	if v, ok := item[attr].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}
