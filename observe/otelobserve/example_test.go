package otelobserve_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/observe/otelobserve"
	"github.com/sqlock/sqlock/retry"
)

func Example() {
	reader := sdkmetric.NewManualReader() // in production: a Prometheus or OTLP exporter
	obs, err := otelobserve.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		panic(err)
	}
	// Pass the same observer to every sqlock package, e.g. retry:
	var _ observe.Observer = obs
	n := 0
	_ = retry.Do(context.Background(), func(context.Context) error {
		if n++; n < 3 {
			return stale{}
		}
		return nil
	}, retry.WithObserver(obs), retry.WithBackoff(retry.Constant(0)))

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "sqlock.retries" {
			fmt.Println(m.Name, m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		}
	}
	// Output: sqlock.retries 2
}

type stale struct{}

func (stale) Error() string      { return "stale" }
func (stale) RetryCause() string { return "stale" }
