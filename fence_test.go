package sqlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/versioned"
)

func TestFencingTokenTravelsInTheContext(t *testing.T) {
	ctx := context.Background()
	if tok, ok := sqlock.FencingToken(ctx); ok || tok != 0 {
		t.Fatalf("empty context: %d %v", tok, ok)
	}
	//lint:ignore SA1012 a nil context carries no token, and must not panic
	if _, ok := sqlock.FencingToken(nil); ok {
		t.Fatal("nil context carries a token")
	}
	ctx = sqlock.WithFencingToken(ctx, 7)
	inner := sqlock.WithFencingToken(ctx, 9)
	if tok, ok := sqlock.FencingToken(ctx); !ok || tok != 7 {
		t.Fatalf("outer: %d %v", tok, ok)
	}
	if tok, ok := sqlock.FencingToken(inner); !ok || tok != 9 {
		t.Fatalf("inner: %d %v", tok, ok)
	}
	child, cancel := context.WithCancel(inner)
	defer cancel()
	if tok, _ := sqlock.FencingToken(child); tok != 9 {
		t.Fatalf("derived context: %d", tok)
	}
	// Not an int64 stored under another key of the same shape.
	type other struct{}
	if _, ok := sqlock.FencingToken(context.WithValue(context.Background(), other{}, int64(3))); ok {
		t.Fatal("another key's value read as a token")
	}
}

type order struct {
	ID      int64
	Status  string
	Version int64 `lock:"version"`
	Fence   int64 `lock:"fence"` // the token of the lock holder that wrote the row
}

// The holder of a fenced lock (a *lease.Lease, or any sqlock.Fenced) puts
// its token in the context; versioned, sqlxhelpers and gormplugin read it
// there for structs with a lock:"fence" field. Without it, a fenced
// struct is refused before anything is sent.
func ExampleWithFencingToken() {
	ctx := context.Background()
	orders := versioned.MustTable("orders")
	o := order{ID: 42, Status: "paid", Version: 3}

	err := versioned.UpdateStruct(ctx, nil, orders, &o, versioned.Set("status", o.Status))
	fmt.Println(errors.Is(err, versioned.ErrInvalidArg))

	ctx = sqlock.WithFencingToken(ctx, 7) // l.Token() of the caller's lease
	tok, _ := sqlock.FencingToken(ctx)
	fmt.Println(tok)
	// Output:
	// true
	// 7
}
