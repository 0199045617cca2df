package otelobserve

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"

	"github.com/sqlock/sqlock/observe"
)

// ScopeName is the instrumentation scope of the meter New asks for.
const ScopeName = "github.com/sqlock/sqlock"

// Observer records observe events as OpenTelemetry metrics, and as spans
// when made with [WithTracerProvider].
type Observer struct {
	wait, hold             metric.Float64Histogram
	acquisitions, lost     metric.Int64Counter
	timeouts               metric.Int64Counter
	staleCount, retryCount metric.Int64Counter
	tracer                 *tracer // nil without WithTracerProvider

	attrs sync.Map // attrKey → metric.MeasurementOption
}

type attrKey struct {
	kind    observe.Kind
	source  string
	outcome observe.Outcome
	shared  bool
	label   string // table or cause
}

// Option configures New.
type Option func(*options) error

type options struct {
	tp      trace.TracerProvider
	waiters *waitersSource
}

// WithTracerProvider makes the Observer record traces beside its metrics:
// a span for each lock's wait (sqlock.lock.wait) and hold (sqlock.lock.hold),
// children of the span in the context of the call that waited or released,
// and span events on the caller's span for each retry (sqlock.retry, with
// the attempt and its cause) and each stale or fenced write (sqlock.stale).
// A nil tp records no traces.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error {
		o.tp = tp
		return nil
	}
}

// New creates the instruments on a meter from provider.
func New(provider metric.MeterProvider, opts ...Option) (*Observer, error) {
	var cfg options
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	if provider == nil {
		return nil, errkind.New(sqlock.ErrNilHandle, "otelobserve: nil MeterProvider")
	}
	m := provider.Meter(ScopeName)
	o := &Observer{}
	if cfg.tp != nil {
		o.tracer = &tracer{cfg.tp.Tracer(ScopeName)}
	}
	var err error
	// Buckets for lock waits and holds: 100µs to 10s.
	bounds := metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
		0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
	if o.wait, err = m.Float64Histogram("sqlock.lock.wait", metric.WithUnit("s"), bounds,
		metric.WithDescription("Time spent waiting for an advisory lock, by outcome.")); err != nil {
		return nil, err
	}
	if o.hold, err = m.Float64Histogram("sqlock.lock.hold", metric.WithUnit("s"), bounds,
		metric.WithDescription("Time an advisory lock was held.")); err != nil {
		return nil, err
	}
	if o.acquisitions, err = m.Int64Counter("sqlock.lock.acquisitions",
		metric.WithDescription("Lock acquisition attempts by outcome.")); err != nil {
		return nil, err
	}
	if o.lost, err = m.Int64Counter("sqlock.lock.lost",
		metric.WithDescription("Held locks whose connection died.")); err != nil {
		return nil, err
	}
	if o.timeouts, err = m.Int64Counter("sqlock.lock.timeouts",
		metric.WithDescription("Lock waits that ran out (lock_timeout, SQLSTATE 55P03).")); err != nil {
		return nil, err
	}
	if o.staleCount, err = m.Int64Counter("sqlock.stale.conflicts",
		metric.WithDescription("Versioned writes that found a stale version.")); err != nil {
		return nil, err
	}
	if o.retryCount, err = m.Int64Counter("sqlock.retries",
		metric.WithDescription("Operations retried, by cause.")); err != nil {
		return nil, err
	}
	if cfg.waiters != nil {
		if err := cfg.waiters.register(m); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Observe implements observe.Observer.
func (o *Observer) Observe(ctx context.Context, e observe.Event) {
	switch e.Kind {
	case observe.LockAcquire:
		opt := o.attrsFor(attrKey{kind: e.Kind, source: e.Source, outcome: e.Outcome, shared: e.Shared})
		o.acquisitions.Add(ctx, 1, opt)
		o.wait.Record(ctx, e.Wait.Seconds(), opt)
		if e.Outcome == observe.Timeout {
			o.timeouts.Add(ctx, 1, opt)
		}
	case observe.LockRelease:
		opt := o.attrsFor(attrKey{kind: e.Kind, source: e.Source, outcome: e.Outcome, shared: e.Shared})
		o.hold.Record(ctx, e.Hold.Seconds(), opt)
		if e.Outcome == observe.Lost {
			o.lost.Add(ctx, 1, opt)
		}
	case observe.Stale:
		o.staleCount.Add(ctx, 1, o.attrsFor(attrKey{kind: e.Kind, source: e.Source, label: e.Table}))
	case observe.Retry:
		o.retryCount.Add(ctx, 1, o.attrsFor(attrKey{kind: e.Kind, source: e.Source, label: e.Cause}))
	}
	if o.tracer != nil {
		o.tracer.observe(ctx, e)
	}
}

func (o *Observer) attrsFor(k attrKey) metric.MeasurementOption {
	if v, ok := o.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	kv := []attribute.KeyValue{attribute.String("sqlock.source", k.source)}
	switch k.kind {
	case observe.LockAcquire, observe.LockRelease:
		kv = append(kv, attribute.String("outcome", k.outcome.String()), attribute.Bool("shared", k.shared))
	case observe.Stale:
		kv = append(kv, attribute.String("table", k.label))
	case observe.Retry:
		kv = append(kv, attribute.String("cause", k.label))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	v, _ := o.attrs.LoadOrStore(k, opt)
	return v.(metric.MeasurementOption)
}
