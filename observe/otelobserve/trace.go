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

// Attribute keys of sqlock's own (the rest follow OpenTelemetry's database
// semantic conventions).
const (
	attrSource  = attribute.Key("sqlock.source")
	attrLockKey = attribute.Key("sqlock.lock.key")
	attrName    = attribute.Key("sqlock.lock.name")
	attrShared  = attribute.Key("sqlock.lock.shared")
	attrOutcome = attribute.Key("sqlock.lock.outcome")
	attrAttempt = attribute.Key("sqlock.retry.attempt")
	attrCause   = attribute.Key("sqlock.retry.cause")
	attrBackoff = attribute.Key("sqlock.retry.backoff_s")
	attrTable   = attribute.Key("db.collection.name")
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
		attrs := []attribute.KeyValue{attrSource.String(e.Source), attrAttempt.Int(e.Attempt),
			attrCause.String(e.Cause), attrBackoff.Float64(e.Wait.Seconds())}
		if e.Err != nil {
			attrs = append(attrs, semconv.ExceptionMessage(e.Err.Error()))
		}
		span.AddEvent(eventRetry, trace.WithAttributes(attrs...))
	case observe.Stale:
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return
		}
		attrs := []attribute.KeyValue{attrSource.String(e.Source), attrTable.String(e.Table),
			attrFenced.Bool(errors.Is(e.Err, versioned.ErrFenced))}
		if e.Err != nil {
			attrs = append(attrs, semconv.ExceptionMessage(e.Err.Error()))
		}
		span.AddEvent(eventStale, trace.WithAttributes(attrs...))
	}
}

// lockSpan records a span of d ending now, a child of ctx's span.
func (tr tracer) lockSpan(ctx context.Context, name string, e observe.Event, d time.Duration) {
	end := time.Now()
	system, op := semconv.DBSystemNamePostgreSQL, "pg_advisory_lock"
	switch e.Source {
	case "txlock":
		op = "pg_advisory_xact_lock"
	case "lease":
		op = "lease"
	case "redislock":
		system, op = semconv.DBSystemNameRedis, "redislock"
	}
	// Leases and Redis locks are named, not numbered: they have no key.
	numbered := e.Source != "lease" && e.Source != "redislock"
	if e.Shared && numbered {
		op += "_shared"
	}
	attrs := []attribute.KeyValue{
		system,
		semconv.DBOperationName(op),
		attrSource.String(e.Source),
		attrShared.Bool(e.Shared),
		attrOutcome.String(e.Outcome.String()),
	}
	if numbered {
		attrs = append(attrs, attrLockKey.Int64(e.Key))
	}
	if e.Name != "" {
		attrs = append(attrs, attrName.String(e.Name))
	}
	_, span := tr.t.Start(ctx, name, trace.WithTimestamp(end.Add(-d)),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	switch e.Outcome {
	case observe.Acquired, observe.Released, observe.Busy:
	default:
		span.SetAttributes(semconv.ErrorTypeKey.String(e.Outcome.String()))
		msg := e.Outcome.String()
		if e.Err != nil {
			msg = e.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End(trace.WithTimestamp(end))
}
