// Package decoy is a backend whose conformance_test.go imports the suite
// but never calls its Run.
package decoy

import (
	"context"
	"time"
)

type Lock struct{ lost chan struct{} }

func (l *Lock) Release(ctx context.Context) error { return nil }
func (l *Lock) Lost() <-chan struct{}             { return l.lost }
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, time.Second)
}
func (l *Lock) Err() error { return nil }
