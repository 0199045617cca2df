// Package locktest is the conformance suite of sqlock's lock backends:
// every promise the root package makes of [sqlock.Acquirer], [sqlock.Lock]
// and [sqlock.Fenced], run against a backend's real servers from the
// backend's own conformance_test.go:
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, locktest.Backend{
//			Name:    "mybackend",
//			Caps:    locktest.Caps{Fenced: true, TTL: true},
//			MinTTL:  mybackend.MinTTL,
//			NotHeld: mybackend.ErrNotHeld,
//			Start:   func(t *testing.T) string { return startServer(t).Addr },
//			Open:    func(t testing.TB, addr string) locktest.Harness { … },
//		})
//	}
//
// A backend declares what it is ([Caps]: fenced or not, with a TTL or
// not) and supplies a [Harness]: a constructor of Acquirers with the
// suite's [Options] (TTL, wait bound, observer), one whose servers cannot
// be reached (to show that bad input is refused before anything is sent),
// and its own fault (Lose: kill the holder's connection, expire its TTL on
// the server). A declared difference is checked, not skipped: a backend
// that is not fenced must hand out locks that are not [sqlock.Fenced].
//
// [Run] runs, as subtests: try and blocking acquisition; ErrNotAcquired at
// once on a held name; a bounded wait ending in ErrTimeout, matching
// context.DeadlineExceeded only when the caller's deadline passed;
// Release idempotent and owner-checked; Lost, Context and Err after a loss
// provoked through Lose; tokens strictly increasing across holders; bad
// names and TTLs refused with an error matching
// [sqlock.ErrInvalidArgument]; an observer's panic releasing the lock;
// exclusion across several OS processes (the test binary run again as
// workers, the file witness of internal/testing/exclusiontest); and a history of a lock
// guarding a register, fenced by the tokens where the backend mints them,
// recorded while holders lose their locks through Lose and checked for
// linearizability with porcupine.
//
// Nothing in the suite asserts a duration: outcomes are checked by order,
// exclusion, counts and typed errors, so that it passes on a loaded machine.
// Its API names no server: a backend's conformance_test.go brings its
// own, so nested modules (etcdlock, dynamo) run the same suite.
package locktest
