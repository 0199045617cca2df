package otelobserve

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/versioned"
)

// Span and event names.
const (
	spanWait   = "sqlock.lock.wait"
	spanHold   = "sqlock.lock.hold"
	eventRetry = "sqlock.retry"
	eventStale = "sqlock.stale"
)

// Attribute keys of sqlock's own, shared by metrics and spans (db.system.name,
// db.collection.name and error.type are OpenTelemetry's own).
const (
	attrSource  = attribute.Key("sqlock.source")
	attrLockKey = attribute.Key("sqlock.lock.key")
	attrName    = attribute.Key("sqlock.lock.name")
	attrShared  = attribute.Key("sqlock.lock.shared")
	attrOutcome = attribute.Key("sqlock.lock.outcome")
	attrAttempt = attribute.Key("sqlock.retry.attempt")
	attrCause   = attribute.Key("sqlock.retry.cause")
	attrBackoff = attribute.Key("sqlock.retry.backoff_s")
	attrTable   = semconv.DBCollectionNameKey
	attrFenced  = attribute.Key("sqlock.fenced")
)

// tracer turns lock events into spans and retries and conflicts into span
// events. Every event reports after the fact (an acquisition when it ends, a
// hold when it is released), so each span is made whole from the event:
// it starts Wait (or Hold) before the event and ends at it.
type tracer struct{ t trace.Tracer }

func (tr tracer) observe(ctx context.Context, e observe.Event) {
	switch e.Kind {
	case observe.LockAcquire:
		tr.lockSpan(ctx, spanWait, e, e.Wait)
	case observe.LockRelease:
		tr.lockSpan(ctx, spanHold, e, e.Hold)
	case observe.Retry:
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return
		}
		attrs := append(common(e.Source, e.System), attrAttempt.Int(e.Attempt),
			attrCause.String(e.Cause), attrBackoff.Float64(e.Wait.Seconds()))
		if e.Err != nil {
			attrs = append(attrs, semconv.ExceptionMessage(e.Err.Error()))
		}
		span.AddEvent(eventRetry, trace.WithAttributes(attrs...))
	case observe.Stale:
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return
		}
		attrs := append(common(e.Source, e.System), attrTable.String(e.Table),
			attrFenced.Bool(errors.Is(e.Err, versioned.ErrFenced)))
		if e.Err != nil {
			attrs = append(attrs, semconv.ExceptionMessage(e.Err.Error()))
		}
		span.AddEvent(eventStale, trace.WithAttributes(attrs...))
	}
}

// lockSpan records a span of d ending now, a child of ctx's span. Every
// attribute comes from the event: the store from System, the lock from Key
// and Name, so a new backend needs no edit here.
func (tr tracer) lockSpan(ctx context.Context, name string, e observe.Event, d time.Duration) {
	end := time.Now()
	attrs := append(common(e.Source, e.System),
		attrShared.Bool(e.Shared),
		attrOutcome.String(e.Outcome.String()),
	)
	// A lock known by Name alone (a lease, a Redis or etcd lock) has Key 0;
	// a numbered one (advisory, txlock) has a Key, and a Name only when it
	// was made from text.
	if e.Key != 0 || e.Name == "" {
		attrs = append(attrs, attrLockKey.Int64(e.Key))
	}
	if e.Name != "" {
		attrs = append(attrs, attrName.String(e.Name))
	}
	_, span := tr.t.Start(ctx, name, trace.WithTimestamp(end.Add(-d)),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if isError(e.Outcome) {
		span.SetAttributes(semconv.ErrorTypeKey.String(e.Outcome.String()))
		msg := e.Outcome.String()
		if e.Err != nil {
			msg = e.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End(trace.WithTimestamp(end))
}
