package dynamo_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/dynamo"
	"github.com/sqlock/sqlock/dynamo/internal/dynamotest"
	"github.com/sqlock/sqlock/internal/testing/locktest"
)

// TestConformance runs the lock backends' conformance suite on locks in a
// dynalite table. The target is the server's endpoint and the table's
// name, so that the suite's worker processes reach both.
func TestConformance(t *testing.T) {
	locktest.Run(t, locktest.Backend{
		Name:     "dynamo",
		Caps:     locktest.Caps{Fenced: true, TTL: true},
		MinTTL:   dynamo.MinTTL,
		NotHeld:  dynamo.ErrNotHeld,
		BadNames: []string{"\xff\xfe", strings.Repeat("n", dynamo.MaxNameLen+1)},
		Start: func(t *testing.T) string {
			s := dynamotest.New(t, dynamotest.Options{})
			return s.Endpoint + " " + lockTable(t, s.Client(nil))
		},
		Open: func(t testing.TB, target string) locktest.Harness {
			endpoint, table, _ := strings.Cut(target, " ")
			c := dynamodb.New(dynamotest.ClientOptions(endpoint))
			locker := func(c *dynamodb.Client, o locktest.Options) sqlock.Acquirer {
				return dynamo.NewLocker(c, table, dynamo.WithTimeout(o.Timeout), dynamo.WithObserver(o.Observer)).Acquirer(o.TTL)
			}
			return locktest.Harness{
				New: func(o locktest.Options) sqlock.Acquirer { return locker(c, o) },
				Unreachable: func(o locktest.Options) sqlock.Acquirer {
					return locker(dynamodb.New(dynamotest.ClientOptions("http://"+locktest.ClosedAddr(t))), o)
				},
				Lose: func(ctx context.Context, name string, lk sqlock.Lock) error {
					return free(ctx, c, table, name, lk.(sqlock.Fenced).Token())
				},
			}
		},
	})
}

// free frees the lock item of name, as a takeover by another holder would
// end its holder's claim, if its last token is token: the holder's next
// renewal is refused.
func free(ctx context.Context, c *dynamodb.Client, table, name string, token int64) error {
	_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{dynamo.AttrName: &types.AttributeValueMemberS{Value: name}},
		UpdateExpression:          aws.String("REMOVE #o, #r, #l"),
		ConditionExpression:       aws.String("#f = :t"),
		ExpressionAttributeNames:  map[string]string{"#o": dynamo.AttrOwner, "#r": dynamo.AttrRV, "#l": dynamo.AttrLease, "#f": dynamo.AttrFence},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberN{Value: strconv.FormatInt(token, 10)}},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return errors.New("the lock is not held with token " + strconv.FormatInt(token, 10))
	}
	return err
}
