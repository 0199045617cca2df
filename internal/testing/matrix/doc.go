// Package matrix is the harness of `make matrix`: every mechanism of the
// guide's decision table run under the same load and the same faults, its
// figures written as JSON for internal/tools/matrix to render as
// docs/matrix.md.
//
// A module's TestMatrix calls [Run] with its [Row]s. A row names a
// mechanism, the [Workload]s it serves and how to [Row.Open] one [Actor]
// per contender on a [Cell]: a fresh [State] (the workload's tables in
// PostgreSQL, without unique constraints, so that a mechanism that fails
// shows as anomalies) reached over the cell's [Net], loopback or through
// pgtest's proxy at 0.5 ms a round trip, with every round trip counted on
// the wire ([RoundTrips]). An actor's operation is the workload's
// unguarded read-check-write ([State.Apply]) under the row's guard, or the
// mechanism's own conditional write.
//
// The grid depends on the [Mode] (MATRIX): "full" runs 1, 8, 32 and 64
// contenders on one hot key and on many keys, over loopback and the proxy;
// "quick" (or unset: what make test, and so CI, runs) 4 contenders doing 6
// operations each on both key shapes and both networks, and every fault
// with a few operations, which proves the harness works rather than
// measuring. Each
// cell reports ops/s, p50 and p99 latency, round trips per operation,
// refusals, typed errors and the workload's anomalies ([State.Check]); an
// anomaly under no fault fails the test.
//
// A row's [Fault]s inject a fault around operations ([FaultRun]) and end in
// a [Verdict]: safe (no anomaly over the operations run), unavailable
// (errors, no anomaly, and for how long) or unsafe (anomalies, with one
// printed example). A fault whose Expect is set fails the test when the run
// disagrees; an empty Expect records the verdict without asserting it.
// What every lock row's faults share lives here once: the guarded operation
// of an [sqlock.Acquirer]'s lock ([Guarded], [LockName]); the pause point
// between a read and its write ([PauseBeforeWrite]) and an operation held
// there while a fault is made ([Hold], [FaultRun.Hold]); the holder paused
// past its TTL, a real OS process stopped with SIGSTOP, fenced, unfenced
// or guarded, once or in rounds around another fault such as a failover
// ([FaultRun.PausedHolder], [FaultRun.PausedRound], [ServePausedHolder]);
// and the holder partitioned from its store by a proxy
// ([FaultRun.Partitioned]).
//
// Durations are measured and reported, never asserted. With MATRIX_OUT set,
// [Run] writes $MATRIX_OUT/<module>.json ([Report]).
package matrix
