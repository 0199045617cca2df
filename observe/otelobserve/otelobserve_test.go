package otelobserve_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/observe/otelobserve"
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

func TestRecordsEveryEventKind(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	o, err := otelobserve.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		o.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "advisory", Outcome: observe.Acquired, Wait: 2 * time.Millisecond})
	}
	o.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "advisory", Outcome: observe.Busy})
	o.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "txlock", Outcome: observe.Timeout, Wait: time.Second})
	o.Observe(ctx, observe.Event{Kind: observe.LockAcquire, Source: "txlock", Outcome: observe.Deadlock})
	o.Observe(ctx, observe.Event{Kind: observe.LockRelease, Source: "advisory", Outcome: observe.Released, Hold: 30 * time.Millisecond})
	o.Observe(ctx, observe.Event{Kind: observe.LockRelease, Source: "advisory", Outcome: observe.Lost, Hold: time.Second})
	o.Observe(ctx, observe.Event{Kind: observe.Stale, Source: "versioned", Table: "orders"})
	o.Observe(ctx, observe.Event{Kind: observe.Stale, Source: "gormplugin", Table: "orders"})
	o.Observe(ctx, observe.Event{Kind: observe.Retry, Source: "retry", Cause: "stale"})
	o.Observe(ctx, observe.Event{Kind: observe.Retry, Source: "retry", Cause: "40001"})
	o.Observe(ctx, observe.Event{Kind: observe.Retry, Source: "retry", Cause: "40001"})

	ms := collect(t, reader)
	acq := ms["sqlock.lock.acquisitions"]
	for outcome, want := range map[string]int64{"acquired": 3, "busy": 1, "timeout": 1, "deadlock": 1} {
		if got := sumWhere(t, acq, "outcome", outcome); got != want {
			t.Errorf("acquisitions{outcome=%s} = %d, want %d", outcome, got, want)
		}
	}
	if got := sumWhere(t, ms["sqlock.lock.timeouts"], "outcome", "timeout"); got != 1 {
		t.Errorf("timeouts = %d", got)
	}
	if _, ok := ms["sqlock.lock.waiters"]; ok {
		t.Error("the waiters gauge is on without WithWaiters")
	}
	if got := sumWhere(t, ms["sqlock.lock.lost"], "outcome", "lost"); got != 1 {
		t.Errorf("lost = %d", got)
	}
	if got := sumWhere(t, ms["sqlock.stale.conflicts"], "table", "orders"); got != 2 {
		t.Errorf("stale = %d", got)
	}
	if got := sumWhere(t, ms["sqlock.retries"], "cause", "40001"); got != 2 {
		t.Errorf("retries{40001} = %d", got)
	}
	wait := ms["sqlock.lock.wait"].Data.(metricdata.Histogram[float64])
	var count uint64
	var total float64
	for _, dp := range wait.DataPoints {
		count += dp.Count
		total += dp.Sum
	}
	if count != 6 || total < 1.006 || total > 1.0061 {
		t.Errorf("wait histogram: %d points summing %v s", count, total)
	}
	hold := ms["sqlock.lock.hold"].Data.(metricdata.Histogram[float64])
	if len(hold.DataPoints) != 2 {
		t.Errorf("hold histogram has %d series, want released and lost", len(hold.DataPoints))
	}
	if ms["sqlock.lock.wait"].Unit != "s" {
		t.Errorf("unit %q", ms["sqlock.lock.wait"].Unit)
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
