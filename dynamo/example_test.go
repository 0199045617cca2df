package dynamo_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock/dynamo"
)

// exampleClient is a client of DYNAMODB_ENDPOINT. A program on AWS would
// use config.LoadDefaultConfig and dynamodb.NewFromConfig instead.
func exampleClient() *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(os.Getenv("DYNAMODB_ENDPOINT")),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "example", SecretAccessKey: "example"}, nil
		}),
	})
}

// The article's claimTask: the first worker to swap "unclaimed" for
// "claimed" wins; the second loses, with no error.
func ExampleTable_CompareAndSwap() {
	ctx := context.Background()
	c := exampleClient()
	c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("example-tasks"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	dynamodb.NewTableExistsWaiter(c).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("example-tasks")}, time.Minute)
	c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("example-tasks"), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: "task-1"}, "status": &types.AttributeValueMemberS{Value: "unclaimed"}}})

	tasks := dynamo.NewTable(c, "example-tasks", "id")
	for _, worker := range []string{"w1", "w2"} {
		won, err := tasks.CompareAndSwap(ctx, dynamo.Key{"task-1"},
			[]dynamo.Pair{dynamo.Eq("status", "unclaimed")},
			dynamo.Set("status", "claimed"), dynamo.Set("worker", worker))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(worker, "won:", won)
	}
	// Output:
	// w1 won: true
	// w2 won: false
}

// A lock with a fencing token, and a write that DynamoDB refuses once a
// newer holder has written.
func ExampleLocker() {
	ctx := context.Background()
	c := exampleClient()
	if err := dynamo.CreateLockTable(ctx, c, "example-locks"); err != nil {
		log.Fatal(err)
	}
	locks := dynamo.NewLocker(c, "example-locks")
	l, err := locks.Acquire(ctx, "report:daily", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	ctx, cancel := l.Context(ctx) // ends if the lock is lost; carries the token
	defer cancel()
	_, err = locks.TryAcquire(ctx, "report:daily", 10*time.Second)
	fmt.Println("second holder:", err)
	fmt.Println("token:", l.Token())
	// Output:
	// second holder: dynamo: tryacquire on example-locks "report:daily": held by someone else
	// token: 1
}
