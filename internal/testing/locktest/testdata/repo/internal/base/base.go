// Package base is a shared toolkit whose Hold has every method of
// sqlock.Lock, as a TTL-lock toolkit would: a backend that embeds it
// implements sqlock.Lock without declaring a method.
package base

import "context"

type Hold struct{ lost chan struct{} }

func (h *Hold) Release(ctx context.Context) error { return nil }
func (h *Hold) Lost() <-chan struct{}             { return h.lost }
func (h *Hold) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(parent)
}
func (h *Hold) Err() error { return nil }
