// Package lookalike has a type whose methods have Lock's names but not its
// signatures: Lost returns a bidirectional channel. It is no backend.
package lookalike

import "context"

type Lock struct{ lost chan struct{} }

func (l *Lock) Release(ctx context.Context) error { return nil }
func (l *Lock) Lost() chan struct{}               { return l.lost }
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(parent)
}
func (l *Lock) Err() error { return nil }
