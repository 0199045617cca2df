package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

// LockTableInput is the definition of a lock table called table: the
// string partition key [AttrName], on-demand billing. Every other
// attribute is written by the locks.
func LockTableInput(table string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrName), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrName), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}
}

// LockTableDefinition is [LockTableInput] as JSON, for infrastructure as
// code: aws dynamodb create-table --cli-input-json "$(…)", or a
// CloudFormation / Terraform resource written from it.
func LockTableDefinition(table string) string {
	b, _ := json.MarshalIndent(LockTableInput(table), "", "  ")
	return string(b)
}

// CreateLockTable creates the lock table called table ([LockTableInput])
// and waits until it is active. A table that already exists is left as it
// is.
func CreateLockTable(ctx context.Context, client *dynamodb.Client, table string) error {
	const op = "create-table"
	if client == nil {
		return &Error{Op: op, Table: table, Cause: errkind.New(sqlock.ErrNilHandle, "dynamo: nil client")}
	}
	if table == "" {
		return invalid(op, "", "", "empty table name")
	}
	_, err := client.CreateTable(ctx, LockTableInput(table))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return &Error{Op: op, Table: table, Cause: err}
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 5*time.Minute); err != nil {
		return &Error{Op: op, Table: table, Cause: err}
	}
	return nil
}
