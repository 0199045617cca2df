// Package otelobserve turns sqlock's observe events into OpenTelemetry
// metrics and traces: how long callers wait for locks and hold them, how
// often they contend or time out, how often optimistic writes conflict and
// work is retried — and, in a trace, where each wait and hold sat in the
// request.
//
// Start with [New] on a metric.MeterProvider, and pass the [Observer] to each
// package's WithObserver (the options add up: see
// [github.com/sqlock/sqlock/observe]). [WithTracerProvider] adds traces;
// [WithWaiters] adds a count read from the server.
//
// # Metrics
//
// Advisory locks, txlock, leases and Redis locks report into the same
// instruments; sqlock.source (the reporting package) and db.system.name (the
// event's System: postgresql, mariadb, redis, etcd, aws.dynamodb …, absent
// where the reporter cannot know it, as for retry) tell them apart. Nothing
// here names a package or a store, so a new backend needs no edit.
//
//	instrument                 kind, unit              counts or measures                 before
//	sqlock.lock.wait.duration  histogram, s            asking for a lock to the outcome   sqlock.lock.wait
//	sqlock.lock.hold.duration  histogram, s            a hold, to released or lost        sqlock.lock.hold
//	sqlock.lock.acquisitions   counter, {acquisition}  attempts, by outcome               unit none
//	sqlock.lock.timeouts       counter, {timeout}      waits that ran out                 unit none
//	sqlock.lock.lost           counter, {lock}         held locks lost before release     unit none
//	sqlock.stale.conflicts     counter, {conflict}     stale or fenced versioned writes   unit none
//	sqlock.retries             counter, {retry}        retries, by cause                  unit none
//	sqlock.lock.waiter.count   updowncounter, {waiter} sessions waiting per key now       gauge sqlock.lock.waiters
//
//	attribute            on                                         before
//	sqlock.source        every instrument                           sqlock.source
//	db.system.name       every instrument, where the event has one  (spans only, guessed from the package)
//	sqlock.lock.outcome  wait, hold, acquisitions, timeouts, lost   outcome
//	sqlock.lock.shared   the same                                   shared
//	error.type           the same, for timeout, deadlock, canceled, failed and lost   (spans only)
//	db.collection.name   stale.conflicts                            table
//	sqlock.fenced        stale.conflicts: a newer fencing token     (spans only)
//	sqlock.retry.cause   retries (stale, 40001, 40P01, renew, …)    cause
//	sqlock.lock.key      waiter.count: the key's 64 bits, an int    a string: the name, else the number
//	sqlock.lock.name     waiter.count, where the name is known      (in sqlock.lock.key)
//
// Why these names, by OpenTelemetry's semantic conventions (the naming and
// metrics guidelines; meter and tracer declare schema 1.43.0): a duration is a histogram in s named
// *.duration (db.client.operation.duration); a counter of discrete things
// has a plural name and a singular {annotation} unit (system.paging.faults,
// db.client.connection.timeouts {timeout}), and a thing that something
// happened to is named thing.participle (system.network.packet.dropped, so
// sqlock.lock.lost in {lock}); a count that goes up and down is an
// UpDownCounter, never plural, named *.count (system.process.count), and
// summing it over keys means something, which a gauge's sum would not;
// attributes follow {object}.{property} under sqlock's namespace, and use the
// conventions' own db.system.name, db.collection.name and error.type where
// those mean the thing. Lock keys stay out of metric attributes: one series
// per key is unbounded where keys are per row; only the opt-in
// [WithWaiters] pays it, once per key that has waiters.
//
// # Traces
//
// [WithTracerProvider]: spans sqlock.lock.wait and sqlock.lock.hold for each
// lock, children of the span in the caller's context, with the metrics'
// attributes (sqlock.source, db.system.name, sqlock.lock.shared,
// sqlock.lock.outcome, error.type), and sqlock.lock.key (a numbered lock's
// key) and sqlock.lock.name (the key's text, a lease's name, a Redis lock's
// key); a wait that timed out, deadlocked or failed is an error span. They
// no longer carry db.operation.name: a span is a wait or a hold, not one
// database call (a lease polls, Redlock asks each server), and what it said
// is in sqlock.source and sqlock.lock.shared. Retries (sqlock.retry:
// sqlock.retry.attempt, sqlock.retry.cause, sqlock.retry.backoff_s) and stale
// or fenced writes (sqlock.stale: db.collection.name, sqlock.fenced) are
// events on the caller's span. Events arrive when a wait or hold ends, so
// each span is recorded whole then, with its true start time.
//
// Attribute sets are built once per combination and cached in the [Observer],
// so recording a metric allocates nothing after warm-up.
package otelobserve
