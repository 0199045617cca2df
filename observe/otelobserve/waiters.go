package otelobserve

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/inspect"
	"github.com/sqlock/sqlock/internal/errkind"
)

// waitersTimeout bounds one reading of the waiters, so that a slow server
// does not hold up a collection.
const waitersTimeout = 5 * time.Second

type waitersSource struct {
	q    inspect.Queryer
	opts []inspect.Option
}

// WithWaiters adds sqlock.lock.waiter.count, an asynchronous UpDownCounter
// ({waiter}): the sessions waiting for each advisory lock of q's database
// right now, one series per key with waiters, with attributes
// sqlock.lock.key (the key's 64 bits, as spans carry it), sqlock.lock.name
// (the key's text where [inspect] knows it) and db.system.name postgresql.
// Each collection runs [inspect.Take] on q (three or four read-only
// statements, bounded by 5 s); a failed reading reports nothing for that
// collection. Off by default: it queries the server, and a series per key
// costs one time series for every key that ever had a waiter, kept by a
// cumulative backend for as long as it keeps stale series — unbounded where
// keys are per row (order:123).
func WithWaiters(q inspect.Queryer, opts ...inspect.Option) Option {
	return func(o *options) error {
		if q == nil {
			return errkind.New(sqlock.ErrNilHandle, "otelobserve: WithWaiters: nil Queryer")
		}
		o.waiters = &waitersSource{q: q, opts: opts}
		return nil
	}
}

// A count of waiting sessions adds up across keys, so it is an
// UpDownCounter, not a gauge, and its name is singular (.count) as the
// conventions ask of UpDownCounters.
func (w *waitersSource) register(m metric.Meter) error {
	_, err := m.Int64ObservableUpDownCounter(metricWaiters, metric.WithUnit("{waiter}"),
		// Only PostgreSQL's advisory locks have a server-side queue to read.
		metric.WithDescription("Sessions waiting in PostgreSQL for an advisory lock now, by key."),
		metric.WithInt64Callback(func(ctx context.Context, obs metric.Int64Observer) error {
			ctx, cancel := context.WithTimeout(ctx, waitersTimeout)
			defer cancel()
			snap, err := inspect.Take(ctx, w.q, w.opts...)
			if err != nil {
				return err
			}
			type waited struct {
				name string
				n    int64
			}
			byKey := map[int64]waited{}
			for _, l := range snap.Locks {
				if !l.Granted {
					k := keyBits(l.Key)
					byKey[k] = waited{name: l.Name, n: byKey[k].n + 1}
				}
			}
			for k, w := range byKey {
				kv := []attribute.KeyValue{semconv.DBSystemNamePostgreSQL, attrLockKey.Int64(k)}
				if w.name != "" {
					kv = append(kv, attrName.String(w.name))
				}
				obs.Observe(w.n, metric.WithAttributes(kv...))
			}
			return nil
		}))
	return err
}

// keyBits is the key's 64 bits as lock events carry them in Key: the bigint,
// or the two int4 halves of a pair.
func keyBits(k advisory.Key) int64 {
	if a, b, ok := k.Pair(); ok {
		return int64(a)<<32 | int64(uint32(b))
	}
	n, _ := k.Int64()
	return n
}
