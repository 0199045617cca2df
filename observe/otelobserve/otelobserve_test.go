package otelobserve_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/observe/otelobserve"
	"github.com/sqlock/sqlock/versioned"
)

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func sumWhere(t *testing.T, m metricdata.Metrics, key, value string) int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T", m.Name, m.Data)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key(key)); ok && v.AsString() == value {
			n += dp.Value
		}
	}
	return n
}

// points returns the data points of a counter or an UpDownCounter.
func points(t *testing.T, m metricdata.Metrics) []metricdata.DataPoint[int64] {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T", m.Name, m.Data)
	}
	return sum.DataPoints
}

func TestRecordsEveryEventKind(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	o, err := otelobserve.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pg := "postgresql"
	for i := 0; i < 3; i++ {
		o.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "advisory", System: pg, Outcome: observe.Acquired, Wait: 2 * time.Millisecond})
	}
	o.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "advisory", System: pg, Outcome: observe.Busy})
	o.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "txlock", System: pg, Outcome: observe.Timeout, Wait: time.Second})
	o.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "txlock", System: pg, Outcome: observe.Deadlock})
	o.Observe(ctx, observe.Event{Kind: observe.LockRelease, Source: "advisory", System: pg, Outcome: observe.Released, Hold: 30 * time.Millisecond})
	o.Observe(ctx, observe.Event{Kind: observe.LockRelease, Source: "advisory", System: pg, Outcome: observe.Lost, Hold: time.Second})
	o.Observe(ctx, observe.Event{Kind: observe.Stale, Source: "versioned", System: pg, Table: "orders"})
	o.Observe(ctx, observe.Event{Kind: observe.Stale, Source: "gormplugin", System: "mysql", Table: "orders",
		Err: fmt.Errorf("gormplugin: %w", versioned.ErrFenced)})
	o.Observe(ctx, observe.Event{Kind: observe.Retry, Source: "retry", Cause: "stale"})
	o.Observe(ctx, observe.Event{Kind: observe.Retry, Source: "retry", Cause: "40001"})
	o.Observe(ctx, observe.Event{Kind: observe.Retry, Source: "retry", Cause: "40001"})

	ms := collect(t, reader)
	for _, old := range []string{"sqlock.lock.wait", "sqlock.lock.hold", "sqlock.lock.waiters", "sqlock.lock.waiter.count"} {
		if _, ok := ms[old]; ok {
			t.Errorf("%s exported (renamed, or on only with WithWaiters)", old)
		}
	}
	units := map[string]string{
		"sqlock.lock.wait.duration": "s", "sqlock.lock.hold.duration": "s",
		"sqlock.lock.acquisitions": "{acquisition}", "sqlock.lock.timeouts": "{timeout}",
		"sqlock.lock.lost": "{lock}", "sqlock.stale.conflicts": "{conflict}", "sqlock.retries": "{retry}",
	}
	for name, unit := range units {
		m, ok := ms[name]
		if !ok {
			t.Errorf("%s not exported", name)
			continue
		}
		if m.Unit != unit {
			t.Errorf("%s: unit %q, want %q", name, m.Unit, unit)
		}
		if strings.Contains(m.Description, "advisory") {
			t.Errorf("%s: description %q names one backend", name, m.Description)
		}
	}
	acq := ms["sqlock.lock.acquisitions"]
	for outcome, want := range map[string]int64{"acquired": 3, "busy": 1, "timeout": 1, "deadlock": 1} {
		if got := sumWhere(t, acq, "sqlock.lock.outcome", outcome); got != want {
			t.Errorf("acquisitions{sqlock.lock.outcome=%s} = %d, want %d", outcome, got, want)
		}
	}
	// error.type marks the failed outcomes only, as it marks error spans.
	for _, dp := range points(t, acq) {
		outcome, _ := dp.Attributes.Value("sqlock.lock.outcome")
		errType, hasErr := dp.Attributes.Value("error.type")
		failed := outcome.AsString() == "timeout" || outcome.AsString() == "deadlock"
		if hasErr != failed || (failed && errType.AsString() != outcome.AsString()) {
			t.Errorf("acquisitions{%s}: error.type %q (set %v)", outcome.AsString(), errType.AsString(), hasErr)
		}
		if sys, _ := dp.Attributes.Value("db.system.name"); sys.AsString() != pg {
			t.Errorf("acquisitions{%s}: db.system.name %q", outcome.AsString(), sys.AsString())
		}
	}
	if got := sumWhere(t, ms["sqlock.lock.timeouts"], "sqlock.lock.outcome", "timeout"); got != 1 {
		t.Errorf("timeouts = %d", got)
	}
	if got := sumWhere(t, ms["sqlock.lock.lost"], "error.type", "lost"); got != 1 {
		t.Errorf("lost = %d", got)
	}
	if got := sumWhere(t, ms["sqlock.stale.conflicts"], "db.collection.name", "orders"); got != 2 {
		t.Errorf("stale = %d", got)
	}
	for _, dp := range points(t, ms["sqlock.stale.conflicts"]) {
		sys, _ := dp.Attributes.Value("db.system.name")
		fenced, _ := dp.Attributes.Value("sqlock.fenced")
		if fenced.AsBool() != (sys.AsString() == "mysql") {
			t.Errorf("stale.conflicts{db.system.name=%s}: sqlock.fenced %v", sys.AsString(), fenced.AsBool())
		}
	}
	if got := sumWhere(t, ms["sqlock.retries"], "sqlock.retry.cause", "40001"); got != 2 {
		t.Errorf("retries{40001} = %d", got)
	}
	for _, dp := range points(t, ms["sqlock.retries"]) {
		if sys, ok := dp.Attributes.Value("db.system.name"); ok {
			t.Errorf("a retry without a System exported db.system.name %q", sys.AsString())
		}
	}
	wait := ms["sqlock.lock.wait.duration"].Data.(metricdata.Histogram[float64])
	var count uint64
	var total float64
	for _, dp := range wait.DataPoints {
		count += dp.Count
		total += dp.Sum
	}
	if count != 6 || total < 1.006 || total > 1.0061 {
		t.Errorf("wait histogram: %d points summing %v s", count, total)
	}
	hold := ms["sqlock.lock.hold.duration"].Data.(metricdata.Histogram[float64])
	if len(hold.DataPoints) != 2 {
		t.Errorf("hold histogram has %d series, want released and lost", len(hold.DataPoints))
	}
	// No metric of lock events carries a key or a name: one series per key
	// is unbounded.
	for name, m := range ms {
		var sets []attribute.Set
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		}
		for _, set := range sets {
			if set.HasValue("sqlock.lock.key") || set.HasValue("sqlock.lock.name") {
				t.Errorf("%s carries a lock key: %v", name, set.ToSlice())
			}
		}
	}
}

// A store otelobserve has never heard of is exported as the event spells
// it, on metrics and spans alike: a new backend needs no edit here.
func TestAnUnknownSystemIsExportedAsTheEventSpellsIt(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	o, err := otelobserve.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), otelobserve.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "etcdlock", System: "etcd", Name: "job:nightly",
		Outcome: observe.Acquired, Wait: time.Millisecond})
	o.Observe(ctx, observe.Event{Kind: observe.LockRelease, Source: "etcdlock", System: "etcd", Name: "job:nightly",
		Outcome: observe.Released, Hold: time.Millisecond})

	ms := collect(t, reader)
	if got := sumWhere(t, ms["sqlock.lock.acquisitions"], "db.system.name", "etcd"); got != 1 {
		t.Errorf("acquisitions{db.system.name=etcd} = %d, want 1", got)
	}
	for _, name := range []string{"sqlock.lock.wait.duration", "sqlock.lock.hold.duration"} {
		h := ms[name].Data.(metricdata.Histogram[float64])
		if len(h.DataPoints) != 1 {
			t.Fatalf("%s: %d series", name, len(h.DataPoints))
		}
		if sys, _ := h.DataPoints[0].Attributes.Value("db.system.name"); sys.AsString() != "etcd" {
			t.Errorf("%s: db.system.name %q", name, sys.AsString())
		}
		if src, _ := h.DataPoints[0].Attributes.Value("sqlock.source"); src.AsString() != "etcdlock" {
			t.Errorf("%s: sqlock.source %q", name, src.AsString())
		}
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want a wait and a hold", len(spans))
	}
	for _, s := range spans {
		if attr(s, "db.system.name").AsString() != "etcd" || attr(s, "sqlock.lock.name").AsString() != "job:nightly" {
			t.Errorf("%s: attributes %v", s.Name(), s.Attributes())
		}
		// Known by name alone: no key number.
		if has(s, "sqlock.lock.key") {
			t.Errorf("%s: sqlock.lock.key on a named lock: %v", s.Name(), s.Attributes())
		}
	}
}

func TestWarmRecordingAllocatesLittle(t *testing.T) {
	o, err := otelobserve.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := observe.Event{Kind: observe.Retry, Source: "retry", Cause: "stale"}
	o.Observe(ctx, e)
	// The attribute set is cached; what remains is the SDK's own cost.
	if n := testing.AllocsPerRun(200, func() { o.Observe(ctx, e) }); n > 2 {
		t.Fatalf("%v allocs per warm event", n)
	}
}
