// Package leakcheck fails a test that leaves goroutines running.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// Check must be called first in a test: its cleanup then runs after every
// pool, database and client of the test is closed (cleanups run last in,
// first out), and fails the test if a goroutine started since is still
// running. goleak retries for a while, so goroutines that are on their way
// out are not reported. opts are more goleak options, such as functions
// to ignore.
func Check(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	opts = append(opts, goleak.IgnoreCurrent())
	t.Cleanup(func() {
		if err := goleak.Find(opts...); err != nil {
			t.Error(err)
		}
	})
}
