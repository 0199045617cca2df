//go:build race

package versioned_test

// raceEnabled: the race detector slows pure-Go SQLite about tenfold, so the
// SQLite model test runs fewer operations under it.
const raceEnabled = true
