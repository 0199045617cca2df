// Package covered is a backend that runs the suite.
package covered

import (
	"context"

	"github.com/sqlock/sqlock"
)

var _ sqlock.Lock = (*Lock)(nil)

type Lock struct{ lost chan struct{} }

func (l *Lock) Release(ctx context.Context) error { return nil }
func (l *Lock) Lost() <-chan struct{}             { return l.lost }
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(parent)
}
func (l *Lock) Err() error { return nil }
