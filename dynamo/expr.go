package dynamo

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Pair is an attribute and a value: an expected value ([Eq]) or an
// assignment ([Set]). Attr is one top-level attribute, whatever characters
// its name holds ("a.b" is the attribute called a.b, not a path): names
// and values always reach DynamoDB as placeholders
// (ExpressionAttributeNames and ExpressionAttributeValues), never spliced
// into an expression, so a reserved word or any other name needs no
// escaping. Value is marshalled with the SDK's attributevalue package (a
// types.AttributeValue is sent as it is).
type Pair struct {
	Attr  string
	Value any
}

// Eq expects attr to hold v; a nil v expects attr to be absent
// (attribute_not_exists), so "claim if unowned" is Eq("worker", nil).
func Eq(attr string, v any) Pair { return Pair{attr, v} }

// Set assigns v to attr; a nil v removes attr (REMOVE).
func Set(attr string, v any) Pair { return Pair{attr, v} }

// expr builds the expressions of one request: every name and value a
// placeholder of its own.
type expr struct {
	names  map[string]string // placeholder → name
	byName map[string]string // name → placeholder
	values map[string]types.AttributeValue
	set    []string // SET clauses
	remove []string // REMOVE clauses
	add    []string // ADD clauses
	conds  []string // conditions, ANDed
}

func (e *expr) name(attr string) string {
	if p, ok := e.byName[attr]; ok {
		return p
	}
	if e.names == nil {
		e.names, e.byName = map[string]string{}, map[string]string{}
	}
	p := "#n" + strconv.Itoa(len(e.names))
	e.names[p], e.byName[attr] = attr, p
	return p
}

func (e *expr) value(av types.AttributeValue) string {
	if e.values == nil {
		e.values = map[string]types.AttributeValue{}
	}
	p := ":v" + strconv.Itoa(len(e.values))
	e.values[p] = av
	return p
}

func (e *expr) num(n int64) string {
	return e.value(&types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)})
}

func (e *expr) str(s string) string { return e.value(&types.AttributeValueMemberS{Value: s}) }

// assign adds SET attr = av, or REMOVE attr when av is nil.
func (e *expr) assign(attr string, av types.AttributeValue) {
	if av == nil {
		e.remove = append(e.remove, e.name(attr))
		return
	}
	e.set = append(e.set, e.name(attr)+" = "+e.value(av))
}

// expect adds the condition attr = av, or attribute_not_exists(attr) when
// av is nil.
func (e *expr) expect(attr string, av types.AttributeValue) {
	if av == nil {
		e.cond("attribute_not_exists(" + e.name(attr) + ")")
		return
	}
	e.cond(e.name(attr) + " = " + e.value(av))
}

func (e *expr) cond(c string) { e.conds = append(e.conds, c) }

// update is the update expression, nil when empty.
func (e *expr) update() *string {
	var b strings.Builder
	clause := func(kw string, parts []string) {
		if len(parts) == 0 {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(kw)
		b.WriteByte(' ')
		b.WriteString(strings.Join(parts, ", "))
	}
	clause("SET", e.set)
	clause("REMOVE", e.remove)
	clause("ADD", e.add)
	if b.Len() == 0 {
		return nil
	}
	s := b.String()
	return &s
}

// condition is the condition expression, nil when empty.
func (e *expr) condition() *string {
	if len(e.conds) == 0 {
		return nil
	}
	var s string
	if len(e.conds) == 1 {
		s = e.conds[0]
	} else {
		s = "(" + strings.Join(e.conds, ") AND (") + ")"
	}
	return &s
}

// marshal turns a pair's value into an attribute value; nil stays nil (an
// absent attribute).
func marshal(v any) (types.AttributeValue, error) {
	if v == nil {
		return nil, nil
	}
	if av, ok := v.(types.AttributeValue); ok {
		return av, nil
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		if rv.IsNil() {
			return nil, nil
		}
	}
	av, err := attributevalue.Marshal(v)
	if err != nil {
		return nil, err
	}
	if _, null := av.(*types.AttributeValueMemberNULL); null || av == nil {
		return nil, fmt.Errorf("a %T has no DynamoDB value", v)
	}
	return av, nil
}

// pairs checks and marshals pairs: non-empty names, each attribute once,
// none of the reserved ones (the table's key, its version or fence
// attribute).
func pairs(what string, ps []Pair, reserved map[string]string) ([]types.AttributeValue, error) {
	avs := make([]types.AttributeValue, len(ps))
	seen := make(map[string]bool, len(ps))
	for i, p := range ps {
		switch {
		case p.Attr == "":
			return nil, fmt.Errorf("%s %d has an empty attribute name", what, i)
		case seen[p.Attr]:
			return nil, fmt.Errorf("%s names attribute %q twice", what, p.Attr)
		case reserved[p.Attr] != "":
			return nil, fmt.Errorf("%s names attribute %q, %s", what, p.Attr, reserved[p.Attr])
		}
		seen[p.Attr] = true
		av, err := marshal(p.Value)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, p.Attr, err)
		}
		avs[i] = av
	}
	return avs, nil
}
