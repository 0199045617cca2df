package dynamotest_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock/dynamo/internal/dynamotest"
	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

func createTable(t *testing.T, c *dynamodb.Client, name string) {
	t.Helper()
	_, err := c.CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := dynamotest.WaitActive(t.Context(), c, name); err != nil {
		t.Fatal(err)
	}
}

func put(ctx context.Context, c *dynamodb.Client, table, id string) error {
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
		Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}})
	return err
}

func exists(t *testing.T, c *dynamodb.Client, table, id string) bool {
	t.Helper()
	out, err := c.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item != nil
}

// TestPersistentDataSurvivesAKill: with Persist, an item written before a
// SIGKILL is there after Start, on the same endpoint; the old client
// works again.
func TestPersistentDataSurvivesAKill(t *testing.T) {
	s := dynamotest.New(t, dynamotest.Options{Persist: true})
	c := s.Client(nil)
	table := dynamotest.Table(t)
	createTable(t, c, table)
	if err := put(t.Context(), c, table, "a"); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if serverproc.Alive(pid) {
		t.Fatalf("dynalite %d alive after Kill", pid)
	}
	if err := put(t.Context(), c, table, "b"); err == nil {
		t.Fatal("a write to a killed server succeeded")
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !exists(t, c, table, "a") {
		t.Fatal("the item written before the kill is gone")
	}
}

// TestPausedServerAnswersNothingUntilResumed: a request to a paused
// (SIGSTOP) server ends with its context; after Resume the server answers.
func TestPausedServerAnswersNothingUntilResumed(t *testing.T) {
	s := dynamotest.New(t, dynamotest.Options{})
	c := s.Client(nil)
	table := dynamotest.Table(t)
	createTable(t, c, table)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- put(ctx, c, table, "a") }()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a write to a paused server succeeded")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := put(t.Context(), c, table, "b"); err != nil {
		t.Fatal(err)
	}
}

// TestAnAbortedRequestDoesNotCrashTheServer: a client that closes its
// connection before the request's body has arrived — what an SDK call
// whose context ends does — leaves the server running (dynalite alone
// crashes on it).
func TestAnAbortedRequestDoesNotCrashTheServer(t *testing.T) {
	s := dynamotest.New(t, dynamotest.Options{})
	pid := s.PID()
	for range 3 {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.Endpoint, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 1000\r\n\r\n{\"TableName\":")
		conn.Close()
	}
	c := s.Client(nil)
	createTable(t, c, dynamotest.Table(t)) // answered: the server is up
	if s.PID() != pid || !serverproc.Alive(pid) {
		t.Fatalf("dynalite %d gone after aborted requests", pid)
	}
}

// TestSharedIsOneServer: Shared returns the same server every time.
func TestSharedIsOneServer(t *testing.T) {
	a, b := dynamotest.Shared(t), dynamotest.Shared(t)
	if a != b || a.Endpoint == "" {
		t.Fatalf("Shared returned %p and %p", a, b)
	}
	createTable(t, a.Client(nil), dynamotest.Table(t))
}
