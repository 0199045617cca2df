package otelobserve

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/versioned"

	"github.com/sqlock/sqlock/observe"
)

// ScopeName is the instrumentation scope of the meter New asks for.
const ScopeName = "github.com/sqlock/sqlock"

// Instrument names (see the package documentation for why each is spelt so).
const (
	metricWait         = "sqlock.lock.wait.duration"
	metricHold         = "sqlock.lock.hold.duration"
	metricAcquisitions = "sqlock.lock.acquisitions"
	metricTimeouts     = "sqlock.lock.timeouts"
	metricLost         = "sqlock.lock.lost"
	metricConflicts    = "sqlock.stale.conflicts"
	metricRetries      = "sqlock.retries"
	metricWaiters      = "sqlock.lock.waiter.count"
)

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

// attrKey is everything a metric's attribute set is made from, so that each
// set is built once.
type attrKey struct {
	kind    observe.Kind
	source  string
	system  string
	outcome observe.Outcome
	shared  bool
	fenced  bool
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
	m := provider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	o := &Observer{}
	if cfg.tp != nil {
		o.tracer = &tracer{cfg.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))}
	}
	var err error
	// Buckets for lock waits and holds: 100µs to 10s.
	bounds := metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
		0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
	if o.wait, err = m.Float64Histogram(metricWait, metric.WithUnit("s"), bounds,
		metric.WithDescription("Time from asking for a lock to the outcome, by outcome.")); err != nil {
		return nil, err
	}
	if o.hold, err = m.Float64Histogram(metricHold, metric.WithUnit("s"), bounds,
		metric.WithDescription("Time a lock was held, by how the hold ended.")); err != nil {
		return nil, err
	}
	if o.acquisitions, err = m.Int64Counter(metricAcquisitions, metric.WithUnit("{acquisition}"),
		metric.WithDescription("Lock acquisition attempts, by outcome.")); err != nil {
		return nil, err
	}
	if o.lost, err = m.Int64Counter(metricLost, metric.WithUnit("{lock}"),
		metric.WithDescription("Held locks lost before their release (connection died, TTL ran out).")); err != nil {
		return nil, err
	}
	if o.timeouts, err = m.Int64Counter(metricTimeouts, metric.WithUnit("{timeout}"),
		metric.WithDescription("Lock waits that ran out.")); err != nil {
		return nil, err
	}
	if o.staleCount, err = m.Int64Counter(metricConflicts, metric.WithUnit("{conflict}"),
		metric.WithDescription("Versioned writes that found a stale version or a newer fencing token.")); err != nil {
		return nil, err
	}
	if o.retryCount, err = m.Int64Counter(metricRetries, metric.WithUnit("{retry}"),
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
		opt := o.attrsFor(attrKey{kind: e.Kind, source: e.Source, system: e.System, outcome: e.Outcome, shared: e.Shared})
		o.acquisitions.Add(ctx, 1, opt)
		o.wait.Record(ctx, e.Wait.Seconds(), opt)
		if e.Outcome == observe.Timeout {
			o.timeouts.Add(ctx, 1, opt)
		}
	case observe.LockRelease:
		opt := o.attrsFor(attrKey{kind: e.Kind, source: e.Source, system: e.System, outcome: e.Outcome, shared: e.Shared})
		o.hold.Record(ctx, e.Hold.Seconds(), opt)
		if e.Outcome == observe.Lost {
			o.lost.Add(ctx, 1, opt)
		}
	case observe.Stale:
		o.staleCount.Add(ctx, 1, o.attrsFor(attrKey{kind: e.Kind, source: e.Source, system: e.System,
			fenced: errors.Is(e.Err, versioned.ErrFenced), label: e.Table}))
	case observe.Retry:
		o.retryCount.Add(ctx, 1, o.attrsFor(attrKey{kind: e.Kind, source: e.Source, system: e.System, label: e.Cause}))
	}
	if o.tracer != nil {
		o.tracer.observe(ctx, e)
	}
}

func (o *Observer) attrsFor(k attrKey) metric.MeasurementOption {
	if v, ok := o.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	kv := common(k.source, k.system)
	switch k.kind {
	case observe.LockAcquire, observe.LockRelease:
		kv = append(kv, attrOutcome.String(k.outcome.String()), attrShared.Bool(k.shared))
		if isError(k.outcome) {
			kv = append(kv, semconv.ErrorTypeKey.String(k.outcome.String()))
		}
	case observe.Stale:
		kv = append(kv, attrTable.String(k.label), attrFenced.Bool(k.fenced))
	case observe.Retry:
		kv = append(kv, attrCause.String(k.label))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	v, _ := o.attrs.LoadOrStore(k, opt)
	return v.(metric.MeasurementOption)
}

// common returns the attributes every metric and span carries: the
// reporting package, and the store the event is about where the reporter
// knows it — read from the event, so that a new backend needs no edit here.
func common(source, system string) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 6)
	kv = append(kv, attrSource.String(source))
	if system != "" {
		kv = append(kv, semconv.DBSystemNameKey.String(system))
	}
	return kv
}

// isError says whether an outcome is an error: error.type on metrics and
// an error status on spans. A busy try-once is an answer, not an error.
func isError(o observe.Outcome) bool {
	switch o {
	case observe.Acquired, observe.Released, observe.Busy, observe.OutcomeNone:
		return false
	}
	return true
}
