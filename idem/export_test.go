package idem

import "time"

// WithBatchHook calls f after each statement of Sweep with the keys it
// deleted and how long it ran on the server.
func WithBatchHook(f func(deleted int64, took time.Duration)) Option {
	return func(c *config) error { c.onBatch = f; return nil }
}
