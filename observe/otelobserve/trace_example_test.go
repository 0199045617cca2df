package otelobserve_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqlock/sqlock/observe/otelobserve"
	"github.com/sqlock/sqlock/retry"
)

// Traces beside the metrics: each retry is an event on the caller's span
// (lock waits and holds become spans under it the same way).
func ExampleWithTracerProvider() {
	rec := tracetest.NewSpanRecorder() // in production: an OTLP exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	obs, err := otelobserve.New(sdkmetric.NewMeterProvider(), otelobserve.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	ctx, span := tp.Tracer("app").Start(context.Background(), "checkout")
	n := 0
	_ = retry.Do(ctx, func(context.Context) error {
		if n++; n < 3 {
			return stale{}
		}
		return nil
	}, retry.WithObserver(obs), retry.WithBackoff(retry.Constant(0)))
	span.End()

	for _, ev := range rec.Ended()[0].Events() {
		attrs := attribute.NewSet(ev.Attributes...)
		attempt, _ := attrs.Value("sqlock.retry.attempt")
		cause, _ := attrs.Value("sqlock.retry.cause")
		fmt.Println(ev.Name, attempt.String(), cause.String())
	}
	// Output:
	// sqlock.retry 1 stale
	// sqlock.retry 2 stale
}
