package dynamo

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock/internal/vmodel"
)

// Put writes item, a pointer to a struct with a lock:"version" field (the
// tag package versioned, gormplugin and sqlxhelpers read), marshalled with
// the SDK's attributevalue package, as one conditional PutItem:
//
//   - a version of 0 is a new item: written at version 1, only if no item
//     has its key;
//   - a version n > 0 replaces the item only if it is at version n, and
//     writes it at n+1.
//
// On success the struct's version field holds the new version. Otherwise
// nothing changed, the field keeps its value, and the error is a
// *versioned.StaleError (errors.Is(err, versioned.ErrStale)) telling a
// missing item (Gone) from one at another version (Current) — for a new
// item, Current is the version of the item that already has the key.
//
// The version attribute is named as attributevalue names the field (its
// dynamodbav tag, else the field's name). A lock:"fence" field is not
// supported here (use [Table.UpdateFenced]): such a struct is refused with
// [ErrInvalid].
func (t *Table) Put(ctx context.Context, item any) error {
	const op = "put"
	if err := t.check(op); err != nil {
		return err
	}
	rv := reflect.ValueOf(item)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return invalid(op, t.name, "", fmt.Sprintf("%T is not a non-nil pointer to a struct", item))
	}
	m, err := vmodel.Of(rv.Type())
	if err != nil {
		return &Error{Op: op, Table: t.name, Err: ErrInvalid, Cause: err}
	}
	if m.Fence != nil {
		return invalid(op, t.name, "", "the struct has a lock:\"fence\" field, which Put does not check; use UpdateFenced")
	}
	attr, err := avName(m.Type.FieldByIndex(m.Version.Index))
	if err != nil {
		return invalid(op, t.name, "", err.Error())
	}
	version, err := m.Version.Get(rv)
	if err != nil {
		return err
	}
	next, err := m.Version.Next(version)
	if err != nil {
		return err
	}
	if version == 0 {
		next = 1
	}
	av, err := attributevalue.MarshalMap(item)
	if err != nil {
		return invalid(op, t.name, "", "marshal: "+err.Error())
	}
	k := make(map[string]types.AttributeValue, len(t.keys))
	kv := make(Key, len(t.keys))
	for i, name := range t.keys {
		v, ok := av[name]
		if !ok {
			return invalid(op, t.name, "", fmt.Sprintf("%s marshals no key attribute %q", m.Type, name))
		}
		k[name], kv[i] = v, keyValue(v)
	}
	av[attr] = &types.AttributeValueMemberN{Value: strconv.FormatInt(next, 10)}
	var e expr
	if version == 0 {
		e.cond("attribute_not_exists(" + e.name(t.keys[0]) + ")")
	} else {
		e.expect(attr, &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)})
	}
	_, err = t.c.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(t.name),
		Item:                                av,
		ConditionExpression:                 e.condition(),
		ExpressionAttributeNames:            e.names,
		ExpressionAttributeValues:           e.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		return t.stale(ctx, op, kv, k, version, attr, err)
	}
	return m.Version.Set(rv, next)
}

// avName is the attribute attributevalue marshals the field to.
func avName(sf reflect.StructField) (string, error) {
	tag := sf.Tag.Get("dynamodbav")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" {
		return "", fmt.Errorf("the version field %s is not marshalled (dynamodbav:\"-\")", sf.Name)
	}
	if name == "" {
		name = sf.Name
	}
	return name, nil
}

// keyValue is a key attribute as a Go value, for errors.
func keyValue(av types.AttributeValue) any {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberB:
		return v.Value
	}
	return av
}
