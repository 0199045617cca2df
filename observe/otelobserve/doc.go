// Package otelobserve turns sqlock's observe events into OpenTelemetry
// metrics and traces: how long callers wait for locks and hold them, how
// often they contend or time out, how often optimistic writes conflict and
// work is retried — and, in a trace, where each wait and hold sat in the
// request.
//
// Start with [New] on a metric.MeterProvider, and pass the [Observer] to each
// package's WithObserver (the options add up: see
// [github.com/sqlock/sqlock/observe]). [WithTracerProvider] adds traces;
// [WithWaiters] adds a gauge read from the server.
//
// Instruments (all with attribute "sqlock.source", the reporting package):
//
//	sqlock.lock.wait          histogram, s   time from asking for a lock to the outcome; attrs outcome, shared
//	sqlock.lock.hold          histogram, s   time a lock was held; attrs outcome (released, lost), shared
//	sqlock.lock.acquisitions  counter        attempts by outcome: acquired, busy, timeout, deadlock, canceled, failed
//	sqlock.lock.timeouts      counter        waits that ran out (lock_timeout, 55P03)
//	sqlock.lock.lost          counter        held locks whose connection died
//	sqlock.stale.conflicts    counter        versioned writes that found a stale version; attr table
//	sqlock.retries            counter        retries by cause (stale, 40001, 40P01, 55P03, …)
//	sqlock.lock.waiters       gauge          sessions waiting per key now (WithWaiters only); attr sqlock.lock.key
//
// Traces ([WithTracerProvider]): spans sqlock.lock.wait and sqlock.lock.hold
// for each lock (advisory, txlock, lease, redislock, and any package that
// reports lock events), children of the span in the caller's context, with
// db.system.name (postgresql, or redis), db.operation.name
// (pg_advisory_lock, pg_advisory_xact_lock, lease, redislock),
// sqlock.lock.key (advisory and txlock keys) and sqlock.lock.name; a wait that timed out, deadlocked or failed is an
// error span. Retries (sqlock.retry: attempt, cause, backoff) and stale or
// fenced writes (sqlock.stale: db.collection.name, sqlock.fenced) are events
// on the caller's span. Events arrive when a wait or hold ends, so each span
// is recorded whole then, with its true start time.
//
// Attribute sets are built once per combination and cached in the [Observer],
// so recording a metric allocates nothing after warm-up.
package otelobserve
