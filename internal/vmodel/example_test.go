package vmodel_test

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/sqlock/sqlock/internal/vmodel"
)

func ExampleNext() {
	v, err := vmodel.Next(int8(126))
	fmt.Println(v, err)
	_, err = vmodel.Next(v)
	fmt.Println(errors.Is(err, vmodel.ErrOverflow), err)
	// Output:
	// 127 <nil>
	// true versioned: version overflow: 127 does not fit or cannot be incremented within int8 [-128, 127]
}

func ExampleFieldOf() {
	type Order struct {
		ID    int64  `db:"id"`
		State string `db:"state"`
		Rev   uint32 `lock:"version" db:"rev"`
	}
	f, err := vmodel.FieldOf(reflect.TypeOf(Order{}))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(f.Name, f.Column, f.Type.Kind(), f.Index, f.Max)

	o := &Order{ID: 1, Rev: 41}
	cur, _ := f.Get(reflect.ValueOf(o))
	n, _ := f.Next(cur)
	_ = f.Set(reflect.ValueOf(o), n)
	fmt.Println(o.Rev)

	type Bad struct {
		Rev float64 `lock:"version"`
	}
	_, err = vmodel.FieldOf(reflect.TypeOf(Bad{}))
	fmt.Println(errors.Is(err, vmodel.ErrInvalidModel))
	// Output:
	// Rev rev uint32 [2] 4294967295
	// 42
	// true
}

func ExampleParseTag() {
	tag, err := vmodel.ParseTag("version,column=rev")
	fmt.Println(tag.Version, tag.Key, tag.Column, err)
	_, err = vmodel.ParseTag("verison")
	fmt.Println(err)
	// Output:
	// true false rev <nil>
	// unknown item "verison" in lock tag (known: version, key, fence, column=NAME)
}
