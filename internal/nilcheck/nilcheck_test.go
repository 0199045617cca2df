package nilcheck_test

import (
	"context"
	"database/sql"
	"io"
	"testing"
	"unsafe"

	"github.com/sqlock/sqlock/internal/nilcheck"
)

type tx interface{ Commit(context.Context) error }

type ptrTx struct{}

func (*ptrTx) Commit(context.Context) error { return nil }

type valueTx struct{}

func (valueTx) Commit(context.Context) error { return nil }

type funcTx func()

func (funcTx) Commit(context.Context) error { return nil }

type mapTx map[string]int

func (mapTx) Commit(context.Context) error { return nil }

// TestIs: an untyped nil and every nil-able kind holding nil is nil, even
// inside an interface of another type; a value of any kind that holds
// something, and a value type that cannot be nil, is not.
func TestIs(t *testing.T) {
	var (
		nilTx     tx
		nilPtrTx  tx = (*ptrTx)(nil)
		nilFuncTx tx = funcTx(nil)
		nilMapTx  tx = mapTx(nil)
		nilWriter io.Writer
		nilUnsafe unsafe.Pointer
		zero      int
	)
	for name, v := range map[string]any{
		"untyped nil":               nil,
		"nil interface value":       nilTx,
		"nil *sql.DB":               (*sql.DB)(nil),
		"nil *sql.Conn":             (*sql.Conn)(nil),
		"nil *sql.Tx":               (*sql.Tx)(nil),
		"typed nil pointer":         (*ptrTx)(nil),
		"typed nil in an interface": nilPtrTx,
		"nil func":                  (func())(nil),
		"nil func in an interface":  nilFuncTx,
		"nil map":                   map[string]int(nil),
		"nil map in an interface":   nilMapTx,
		"nil slice":                 []byte(nil),
		"nil chan":                  (chan int)(nil),
		"nil io.Writer":             nilWriter,
		"nil unsafe.Pointer":        nilUnsafe,
	} {
		if !nilcheck.Is(v) {
			t.Errorf("%s: Is = false, want true", name)
		}
	}
	for name, v := range map[string]any{
		"*sql.DB":          &sql.DB{},
		"pointer":          &ptrTx{},
		"value":            valueTx{},
		"value as tx":      tx(valueTx{}),
		"func":             funcTx(func() {}),
		"map":              mapTx{},
		"empty slice":      []byte{},
		"chan":             make(chan int),
		"int":              0,
		"string":           "",
		"unsafe.Pointer":   unsafe.Pointer(&zero),
		"zero struct":      struct{}{},
		"pointer to a nil": new(*ptrTx),
	} {
		if nilcheck.Is(v) {
			t.Errorf("%s: Is = true, want false", name)
		}
	}
}

func BenchmarkIs(b *testing.B) {
	db := &sql.DB{}
	var p tx = &ptrTx{}
	b.Run("*sql.DB", func(b *testing.B) {
		for b.Loop() {
			if nilcheck.Is(db) {
				b.Fatal("nil")
			}
		}
	})
	b.Run("reflect", func(b *testing.B) {
		for b.Loop() {
			if nilcheck.Is(p) {
				b.Fatal("nil")
			}
		}
	})
}
