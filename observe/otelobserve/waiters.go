package otelobserve

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sqlock/sqlock"
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

// WithWaiters adds the observable gauge sqlock.lock.waiters: the sessions
// waiting for each advisory lock of q's database right now, one series per
// key with waiters (attribute sqlock.lock.key: the key's name where
// [inspect] knows it, else its number). Each collection runs
// [inspect.Take] on q (three or four read-only statements, bounded by 5 s);
// a failed reading reports nothing for that collection. Off by default.
func WithWaiters(q inspect.Queryer, opts ...inspect.Option) Option {
	return func(o *options) error {
		if q == nil {
			return errkind.New(sqlock.ErrNilHandle, "otelobserve: WithWaiters: nil Queryer")
		}
		o.waiters = &waitersSource{q: q, opts: opts}
		return nil
	}
}

func (w *waitersSource) register(m metric.Meter) error {
	_, err := m.Int64ObservableGauge("sqlock.lock.waiters",
		metric.WithDescription("Sessions waiting for an advisory lock now, by key."),
		metric.WithInt64Callback(func(ctx context.Context, obs metric.Int64Observer) error {
			ctx, cancel := context.WithTimeout(ctx, waitersTimeout)
			defer cancel()
			snap, err := inspect.Take(ctx, w.q, w.opts...)
			if err != nil {
				return err
			}
			for key, n := range snap.Waiters() {
				obs.Observe(int64(n), metric.WithAttributes(attribute.String("sqlock.lock.key", key)))
			}
			return nil
		}))
	return err
}
