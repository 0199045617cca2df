// Package otelobserve turns sqlock's observe events into OpenTelemetry
// metrics, the numbers to watch for any locking scheme: how long callers
// wait for locks, how long they hold them, how often they contend or time
// out, how often optimistic writes conflict and how often work is retried.
//
// Start with [New] on a metric.MeterProvider, and pass the [Observer] to each
// package's WithObserver (the options add up: see
// [github.com/sqlock/sqlock/observe]).
//
// Instruments (all with attribute "sqlock.source", the reporting package):
//
//	sqlock.lock.wait          histogram, s   time from asking for a lock to the outcome; attrs outcome, shared
//	sqlock.lock.hold          histogram, s   time a lock was held; attrs outcome (released, lost), shared
//	sqlock.lock.acquisitions  counter        attempts by outcome: acquired, busy, timeout, deadlock, canceled, failed
//	sqlock.lock.lost          counter        held locks whose connection died
//	sqlock.stale.conflicts    counter        versioned writes that found a stale version; attr table
//	sqlock.retries            counter        retries by cause (stale, 40001, 40P01, 55P03, …)
//
// Attribute sets are built once per combination and cached in the [Observer],
// so recording an event allocates nothing after warm-up.
package otelobserve
