package otelobserve_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/observe/otelobserve"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newTraced(t *testing.T, opts ...otelobserve.Option) (*otelobserve.Observer, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	o, err := otelobserve.New(sdkmetric.NewMeterProvider(), append(opts, otelobserve.WithTracerProvider(tp))...)
	if err != nil {
		t.Fatal(err)
	}
	return o, rec, tp
}

func has(s sdktrace.ReadOnlySpan, key string) bool {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return true
		}
	}
	return false
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Each lock — an advisory session lock, a txlock transaction lock, retried
// once after a serialization failure, and a lease — has one wait span and
// one hold span per attempt, children of the caller's span, named by the
// text of its key or the lease's name; the retry is an
// event on the caller's span with its cause.
func TestSpansForEachLockWaitAndHoldUnderTheCallersSpan(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	obs, rec, tp := newTraced(t)

	ctx, caller := tp.Tracer("test").Start(ctx, "handler")
	l := advisory.New(db.OpenSQL(), advisory.WithObserver(obs))
	if err := l.Do(ctx, advisory.KeyOf("booking:seat-42"), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	err := txlock.Do(ctx, db.SQL(), advisory.KeyOf("stock:sku-7"), func(ctx context.Context, tx *sql.Tx) error {
		if attempts++; attempts == 1 {
			return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
		}
		return nil
	}, txlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Migrate(ctx, db.SQL()); err != nil {
		t.Fatal(err)
	}
	ls, err := lease.New(db.SQL(), lease.WithObserver(obs)).Acquire(ctx, "report:nightly", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()

	spans := rec.Ended()
	count := map[string]int{}
	var handler sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "handler" {
			handler = s
		}
	}
	for _, s := range spans {
		if s.Name() == "handler" {
			continue
		}
		count[s.Name()+"/"+attr(s, "sqlock.source").AsString()]++
		if s.Parent().SpanID() != handler.SpanContext().SpanID() || s.SpanContext().TraceID() != handler.SpanContext().TraceID() {
			t.Errorf("%s is not a child of the caller's span", s.Name())
		}
		if !s.StartTime().Before(s.EndTime()) || s.StartTime().Before(handler.StartTime()) || s.EndTime().After(handler.EndTime()) {
			t.Errorf("%s: %v..%v outside the caller's %v..%v", s.Name(), s.StartTime(), s.EndTime(), handler.StartTime(), handler.EndTime())
		}
		if attr(s, "db.system.name").AsString() != "postgresql" {
			t.Errorf("%s: db.system.name %q", s.Name(), attr(s, "db.system.name").AsString())
		}
		if s.Status().Code == codes.Error {
			t.Errorf("%s: status %v", s.Name(), s.Status())
		}
	}
	want := map[string]int{
		"sqlock.lock.wait/advisory": 1, "sqlock.lock.hold/advisory": 1,
		"sqlock.lock.wait/txlock": 2, "sqlock.lock.hold/txlock": 2, // two attempts
		"sqlock.lock.wait/lease": 1, "sqlock.lock.hold/lease": 1,
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s: %d spans, want %d (all: %v)", k, count[k], n, count)
		}
	}
	for _, s := range spans {
		src := attr(s, "sqlock.source").AsString()
		if s.Name() == "handler" {
			continue
		}
		if has(s, "db.operation.name") {
			t.Errorf("%s/%s: db.operation.name is gone, got %v", s.Name(), src, s.Attributes())
		}
		if attr(s, "sqlock.lock.outcome").AsString() == "lost" || attr(s, "sqlock.lock.shared").AsBool() {
			t.Errorf("%s/%s span attributes: %v", s.Name(), src, s.Attributes())
		}
		switch src {
		case "advisory":
			k, _ := advisory.KeyOf("booking:seat-42").Int64()
			if attr(s, "sqlock.lock.name").AsString() != "booking:seat-42" || attr(s, "sqlock.lock.key").AsInt64() != k {
				t.Errorf("advisory %s span attributes: %v", s.Name(), s.Attributes())
			}
		case "txlock":
			k, _ := advisory.KeyOf("stock:sku-7").Int64()
			if attr(s, "sqlock.lock.name").AsString() != "stock:sku-7" || attr(s, "sqlock.lock.key").AsInt64() != k {
				t.Errorf("txlock %s span attributes: %v", s.Name(), s.Attributes())
			}
		case "lease":
			// A lease is known by its name alone.
			if attr(s, "sqlock.lock.name").AsString() != "report:nightly" || has(s, "sqlock.lock.key") {
				t.Errorf("lease %s span attributes: %v", s.Name(), s.Attributes())
			}
		}
	}
	var retries []string
	for _, ev := range handler.Events() {
		if ev.Name == "sqlock.retry" {
			for _, kv := range ev.Attributes {
				if kv.Key == "sqlock.retry.cause" {
					retries = append(retries, kv.Value.AsString())
				}
			}
		}
	}
	if len(retries) != 1 || retries[0] != "40001" {
		t.Errorf("retry events on the caller's span: %q", retries)
	}
}

// A wait that times out is an error span; a stale write and a fenced one
// are events on the caller's span; nothing is recorded without a caller's
// span for an event.
func TestTimeoutsAreErrorSpansAndConflictsAreEvents(t *testing.T) {
	obs, rec, tp := newTraced(t)
	ctx, caller := tp.Tracer("test").Start(context.Background(), "handler")
	obs.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "advisory", Key: 1, Outcome: observe.Timeout,
		Wait: 50 * time.Millisecond, Err: errors.New("advisory: timed out waiting for the lock")})
	obs.Observe(ctx, observe.Event{Kind: observe.Stale, Source: "versioned", Table: "orders"})
	obs.Observe(ctx, observe.Event{Kind: observe.Stale, Source: "versioned", Table: "orders", Err: fmt.Errorf("versioned: orders: %w", versioned.ErrFenced)})
	obs.Observe(context.Background(), observe.Event{Kind: observe.Retry, Source: "retry", Attempt: 1, Cause: "stale"})
	caller.End()

	var wait sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "sqlock.lock.wait" {
			wait = s
		}
	}
	if wait == nil || wait.Status().Code != codes.Error || attr(wait, "error.type").AsString() != "timeout" ||
		wait.EndTime().Sub(wait.StartTime()) != 50*time.Millisecond {
		t.Fatalf("timeout span: %+v", wait)
	}
	if has(wait, "db.system.name") || attr(wait, "sqlock.lock.key").AsInt64() != 1 {
		t.Errorf("a wait without a System, key 1: %v", wait.Attributes())
	}
	var fenced []bool
	for _, ev := range rec.Ended()[len(rec.Ended())-1].Events() {
		for _, kv := range ev.Attributes {
			if kv.Key == "sqlock.fenced" {
				fenced = append(fenced, kv.Value.AsBool())
			}
		}
	}
	if len(fenced) != 2 || fenced[0] || !fenced[1] {
		t.Fatalf("stale events: fenced = %v", fenced)
	}
	if len(rec.Ended()) != 2 {
		t.Fatalf("%d spans: an event without a span in its context made one", len(rec.Ended()))
	}
}
