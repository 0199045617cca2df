package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/versioned"
)

// Table is a DynamoDB table of items written with conditions: its name,
// its key attributes, and the attributes that hold an item's version and
// fence. It is safe for concurrent use.
type Table struct {
	c        *dynamodb.Client
	name     string
	keys     []string // the partition key, then the sort key if any
	version  string
	fence    string
	reserved map[string]string // attribute → why a Pair may not name it
	err      error             // from NewTable
}

// TableOption configures a Table.
type TableOption func(*Table) error

// WithVersionAttribute names the attribute that holds an item's version
// for [Table.Update] and [Table.Delete] (default "version"). [Table.Put]
// reads the struct's lock:"version" field instead.
func WithVersionAttribute(attr string) TableOption {
	return func(t *Table) error {
		if attr == "" {
			return errkind.New(sqlock.ErrInvalidOption, "dynamo: empty version attribute")
		}
		t.version = attr
		return nil
	}
}

// WithFenceAttribute names the attribute that holds the fencing token of
// an item's last fenced write (default "fence"; see [Table.UpdateFenced]).
func WithFenceAttribute(attr string) TableOption {
	return func(t *Table) error {
		if attr == "" {
			return errkind.New(sqlock.ErrInvalidOption, "dynamo: empty fence attribute")
		}
		t.fence = attr
		return nil
	}
}

// NewTable returns the table called name, whose items are keyed by the
// attribute partitionKey and, if given, sortKey (at most one).
//
// NewTable does not fail: a nil client, an empty name or key, or an
// invalid option is reported, as an error matching [sqlock.ErrNilHandle],
// [ErrInvalid] or [sqlock.ErrInvalidOption], by every method.
func NewTable(client *dynamodb.Client, name, partitionKey string, sortKey ...string) *Table {
	return NewTableWith(client, name, append([]string{partitionKey}, sortKey...), nil)
}

// NewTableWith is NewTable with options: key holds the partition key and,
// if the table has one, the sort key.
func NewTableWith(client *dynamodb.Client, name string, key []string, opts []TableOption) *Table {
	t := &Table{c: client, name: name, keys: key, version: "version", fence: "fence"}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(t); err != nil {
			t.err = &Error{Op: "table", Table: name, Cause: err}
			return t
		}
	}
	switch {
	case client == nil:
		t.err = &Error{Op: "table", Table: name, Cause: errkind.New(sqlock.ErrNilHandle, "dynamo: nil client")}
	case name == "":
		t.err = invalid("table", "", "", "empty table name")
	case len(key) == 0 || len(key) > 2:
		t.err = invalid("table", name, "", fmt.Sprintf("%d key attributes: a table has a partition key and at most one sort key", len(key)))
	}
	t.reserved = map[string]string{t.version: "the version attribute (the write sets it)",
		t.fence: "the fence attribute (fenced writes set it)"}
	for _, k := range key {
		if k == "" {
			t.err = invalid("table", name, "", "empty key attribute name")
		}
		if k == t.version || k == t.fence {
			t.err = invalid("table", name, "", fmt.Sprintf("key attribute %q is also the version or fence attribute", k))
		}
		t.reserved[k] = "a key attribute (DynamoDB cannot change an item's key)"
	}
	return t
}

// Name is the table's name.
func (t *Table) Name() string { return t.name }

// Key names an item by its key values, in the order of the table's key
// attributes: Key{"task-1"}, or Key{"orders", 42} with a sort key. Each
// value is marshalled with attributevalue and must be a string, a number or
// bytes.
type Key []any

// check reports a nil Table or NewTable's error.
func (t *Table) check(op string) error {
	if t == nil {
		return &Error{Op: op, Cause: errkind.New(sqlock.ErrNilHandle, "dynamo: nil *Table")}
	}
	return t.err
}

// key checks t and k and returns k as the request's key.
func (t *Table) key(op string, k Key) (map[string]types.AttributeValue, error) {
	if err := t.check(op); err != nil {
		return nil, err
	}
	if len(k) != len(t.keys) {
		return nil, invalid(op, t.name, "", fmt.Sprintf("a key of %d values for a table keyed by %d attributes %q", len(k), len(t.keys), t.keys))
	}
	m := make(map[string]types.AttributeValue, len(k))
	for i, v := range k {
		av, err := marshal(v)
		if err != nil {
			return nil, invalid(op, t.name, "", fmt.Sprintf("key attribute %q: %v", t.keys[i], err))
		}
		switch av.(type) {
		case *types.AttributeValueMemberS, *types.AttributeValueMemberN, *types.AttributeValueMemberB:
		default:
			return nil, invalid(op, t.name, "", fmt.Sprintf("key attribute %q: %T is not a string, number or bytes", t.keys[i], v))
		}
		m[t.keys[i]] = av
	}
	return m, nil
}

// CompareAndSwap sets the attributes of set on the item with key, if and
// only if every attribute of expect still holds its expected value — one
// conditional UpdateItem, the article's claimTask:
//
//	UpdateExpression:    SET #n1 = :v1        (#n1 = status, :v1 = "claimed")
//	ConditionExpression: (attribute_exists(#n0)) AND (#n1 = :v0)
//
// It reports whether it swapped; losing (the condition was false: someone
// else swapped first, or no item has the key) is (false, nil), not an
// error. A swap never creates an item. An error means the outcome is not
// known (the request failed) or nothing was sent (bad input: no
// expectation, no assignment, an empty or duplicate attribute, a key
// attribute in set).
//
// The outcome of a request the client's retryer sent twice, because the
// first answer was lost, is the second one's: a swap that won then
// reports false. Where that matters, set an attribute only this caller
// writes (the worker's id) and read the item to tell.
func (t *Table) CompareAndSwap(ctx context.Context, key Key, expect []Pair, set ...Pair) (swapped bool, err error) {
	const op = "compare-and-swap"
	k, err := t.key(op, key)
	if err != nil {
		return false, err
	}
	if len(expect) == 0 {
		return false, invalid(op, t.name, "", "no expected value: a swap without a compare is a plain UpdateItem")
	}
	if len(set) == 0 {
		return false, invalid(op, t.name, "", "nothing to set")
	}
	var e expr
	e.cond("attribute_exists(" + e.name(t.keys[0]) + ")")
	if err := t.addExpect(op, &e, expect); err != nil {
		return false, err
	}
	if err := t.addSet(op, &e, set, t.keyReserved()); err != nil {
		return false, err
	}
	_, err = t.c.UpdateItem(ctx, t.updateInput(k, &e))
	if err != nil {
		if failed, _ := conditionFailed(err); failed {
			return false, nil
		}
		return false, &Error{Op: op, Table: t.name, Cause: err}
	}
	return true, nil
}

// keyReserved is t.reserved without the version and fence: a swap may set
// them, as it may set any attribute but the key.
func (t *Table) keyReserved() map[string]string {
	m := make(map[string]string, len(t.keys))
	for _, k := range t.keys {
		m[k] = t.reserved[k]
	}
	return m
}

func (t *Table) addExpect(op string, e *expr, expect []Pair) error {
	avs, err := pairs("expect", expect, nil)
	if err != nil {
		return invalid(op, t.name, "", err.Error())
	}
	for i, p := range expect {
		e.expect(p.Attr, avs[i])
	}
	return nil
}

func (t *Table) addSet(op string, e *expr, set []Pair, reserved map[string]string) error {
	avs, err := pairs("set", set, reserved)
	if err != nil {
		return invalid(op, t.name, "", err.Error())
	}
	for i, p := range set {
		e.assign(p.Attr, avs[i])
	}
	return nil
}

func (t *Table) updateInput(k map[string]types.AttributeValue, e *expr) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(t.name),
		Key:                       k,
		UpdateExpression:          e.update(),
		ConditionExpression:       e.condition(),
		ExpressionAttributeNames:  e.names,
		ExpressionAttributeValues: e.values,
	}
}

// Update sets the attributes of set on the item with key if its version
// attribute ([WithVersionAttribute]) holds version, and adds one to the
// version in the same conditional UpdateItem; it returns the new version.
//
// If the item is not at that version it changes nothing and returns a
// *versioned.StaleError (errors.Is(err, versioned.ErrStale), which package
// retry retries) that tells a missing item (Gone) from one at another
// version (Current). The answer comes with the refusal where DynamoDB
// attaches the item to it (ReturnValuesOnConditionCheckFailure); where it
// does not (the item is gone, or a server without that feature), one
// consistent GetItem tells.
//
// As with every conditional write, a request the client's retryer sent
// again after a lost answer can report a write that succeeded as stale
// (the item is then at version+1, with this write's values).
func (t *Table) Update(ctx context.Context, key Key, version int64, set ...Pair) (int64, error) {
	const op = "update"
	k, err := t.key(op, key)
	if err != nil {
		return 0, err
	}
	if len(set) == 0 {
		return 0, invalid(op, t.name, "", "nothing to set")
	}
	if version == math.MaxInt64 {
		return 0, &versioned.OverflowError{Type: "int64", Value: strconv.FormatInt(version, 10), Min: math.MinInt64, Max: math.MaxInt64}
	}
	var e expr
	e.expect(t.version, &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)})
	if err := t.addSet(op, &e, set, t.reserved); err != nil {
		return 0, err
	}
	e.set = append(e.set, e.name(t.version)+" = "+e.num(version+1))
	in := t.updateInput(k, &e)
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	if _, err := t.c.UpdateItem(ctx, in); err != nil {
		return 0, t.stale(ctx, op, key, k, version, t.version, err)
	}
	return version + 1, nil
}

// Delete deletes the item with key if its version attribute holds
// version; otherwise it changes nothing and returns a
// *versioned.StaleError, as [Table.Update] does.
func (t *Table) Delete(ctx context.Context, key Key, version int64) error {
	const op = "delete"
	k, err := t.key(op, key)
	if err != nil {
		return err
	}
	var e expr
	e.expect(t.version, &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)})
	_, err = t.c.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                           aws.String(t.name),
		Key:                                 k,
		ConditionExpression:                 e.condition(),
		ExpressionAttributeNames:            e.names,
		ExpressionAttributeValues:           e.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		return t.stale(ctx, op, key, k, version, t.version, err)
	}
	return nil
}

// stale turns a versioned write's failure into its error: a refusal is a
// *versioned.StaleError that says what the item holds now (from the item
// DynamoDB attached, else from a consistent read).
func (t *Table) stale(ctx context.Context, op string, key any, k map[string]types.AttributeValue, expected int64, attr string, err error) error {
	failed, item := conditionFailed(err)
	if !failed {
		return &Error{Op: op, Table: t.name, Cause: err}
	}
	se := &versioned.StaleError{Table: t.name, Key: keyForError(key), Expected: expected, Op: op}
	if item == nil {
		item, err = t.read(ctx, k)
		if err != nil {
			se.ProbeErr = err
			return se
		}
	}
	se.Probed = true
	if item == nil {
		se.Gone = true
		return se
	}
	n, ok, err := number(item[attr])
	switch {
	case err != nil:
		se.Probed, se.ProbeErr = false, err
	case !ok:
		se.CurrentNull = true
	default:
		se.Current = n
	}
	return se
}

// read is a consistent GetItem; a missing item is nil.
func (t *Table) read(ctx context.Context, k map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := t.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(t.name), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// keyForError is the key as versioned's errors print it: one value, or a
// composite.
func keyForError(key any) any {
	if k, ok := key.(Key); ok {
		if len(k) == 1 {
			return k[0]
		}
		return []any(k)
	}
	return key
}

// number reads a number attribute as an int64; ok is false when av is
// absent.
func number(av types.AttributeValue) (n int64, ok bool, err error) {
	if av == nil {
		return 0, false, nil
	}
	nv, isN := av.(*types.AttributeValueMemberN)
	if !isN {
		return 0, false, fmt.Errorf("attribute is a %T, not a number", av)
	}
	n, err = strconv.ParseInt(nv.Value, 10, 64)
	return n, err == nil, err
}

// UpdateFenced sets the attributes of set on the item with key if the
// item's fence attribute ([WithFenceAttribute]) is absent or at most the
// fencing token ctx carries ([sqlock.WithFencingToken]; a [Lock]'s Context
// carries its token), and stores the token in the fence — checked by
// DynamoDB inside the write, as a lock:"fence" column is by PostgreSQL. So
// once a newer holder of the lock has written the item, a holder that lost
// the lock without noticing (paused past its TTL) is refused: a
// *versioned.FencedError (errors.Is(err, versioned.ErrFenced)) with the
// item's fence as Current. Stop then; do not write again under that token.
//
// A fenced write never creates an item: a missing one is an error matching
// [ErrMissing]. A context without a positive token is refused with
// [ErrInvalid] before anything is sent.
func (t *Table) UpdateFenced(ctx context.Context, key Key, set ...Pair) error {
	const op = "fenced update"
	k, err := t.key(op, key)
	if err != nil {
		return err
	}
	token, ok := sqlock.FencingToken(ctx)
	if !ok || token <= 0 {
		return invalid(op, t.name, "", "the context carries no positive fencing token (use the lock's Context, or sqlock.WithFencingToken)")
	}
	if len(set) == 0 {
		return invalid(op, t.name, "", "nothing to set")
	}
	var e expr
	tok := e.num(token)
	e.cond("attribute_exists(" + e.name(t.keys[0]) + ")")
	e.cond("attribute_not_exists(" + e.name(t.fence) + ") OR " + e.name(t.fence) + " <= " + tok)
	if err := t.addSet(op, &e, set, t.reserved); err != nil {
		return err
	}
	e.set = append(e.set, e.name(t.fence)+" = "+tok)
	in := t.updateInput(k, &e)
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err = t.c.UpdateItem(ctx, in)
	if err == nil {
		return nil
	}
	failed, item := conditionFailed(err)
	if !failed {
		return &Error{Op: op, Table: t.name, Cause: err}
	}
	if item == nil {
		if item, err = t.read(ctx, k); err != nil {
			return &Error{Op: op, Table: t.name, Cause: fmt.Errorf("refused, and the read that would say why failed: %w", err)}
		}
	}
	if item == nil {
		return &Error{Op: op, Table: t.name, Err: ErrMissing, Cause: errors.New("key " + vkey(key))}
	}
	cur, _, err := number(item[t.fence])
	if err != nil {
		return &Error{Op: op, Table: t.name, Cause: fmt.Errorf("fence attribute %q: %w", t.fence, err)}
	}
	return &versioned.FencedError{Table: t.name, Key: keyForError(key), Op: "update", Token: token, Current: cur}
}

func vkey(k Key) string { return fmt.Sprint([]any(k)...) }
