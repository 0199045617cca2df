package otelobserve_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/inspect"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe/otelobserve"
)

// The waiter count reads the sessions waiting per key from the server at
// each collection, by the key's number and name.
func TestWaiterCountReadsWaitersPerKey(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	reader := sdkmetric.NewManualReader()
	if _, err := otelobserve.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		otelobserve.WithWaiters(db.SQL(), inspect.WithNames("booking:seat-42"))); err != nil {
		t.Fatal(err)
	}
	k, _ := advisory.KeyOf("booking:seat-42").Int64()
	conns := make([]*pgx.Conn, 3)
	for i := range conns {
		c, err := pgx.Connect(ctx, db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	if _, err := conns[0].Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	for _, c := range conns[1:] {
		go func() {
			_, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", k)
			if err == nil { // let the other waiter in
				_, err = c.Exec(ctx, "SELECT pg_advisory_unlock_all()")
			}
			done <- err
		}()
	}
	gauge := func() (n int64) {
		ms := collect(t, reader)
		m, ok := ms["sqlock.lock.waiter.count"]
		if !ok {
			return 0 // no series: nobody waits
		}
		if m.Unit != "{waiter}" {
			t.Fatalf("unit %q", m.Unit)
		}
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok || sum.IsMonotonic {
			t.Fatalf("%s is %T (monotonic %v), want an UpDownCounter", m.Name, m.Data, sum.IsMonotonic)
		}
		for _, dp := range sum.DataPoints {
			name, _ := dp.Attributes.Value("sqlock.lock.name")
			key, _ := dp.Attributes.Value("sqlock.lock.key")
			sys, _ := dp.Attributes.Value("db.system.name")
			if name.AsString() == "booking:seat-42" && key.AsInt64() == k && sys.AsString() == "postgresql" {
				n += dp.Value
			}
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for gauge() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the gauge never read 2 waiters (last %d)", gauge())
		}
		time.Sleep(5 * time.Millisecond)
	}
	conns[0].Exec(ctx, "SELECT pg_advisory_unlock_all()")
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Close(ctx)
	}
	if n := gauge(); n != 0 {
		t.Fatalf("after the waits: %d", n)
	}
}

func TestNewRefusesNilHandles(t *testing.T) {
	if _, err := otelobserve.New(nil); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil provider: %v", err)
	}
	if _, err := otelobserve.New(sdkmetric.NewMeterProvider(), otelobserve.WithWaiters(nil)); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil Queryer: %v", err)
	}
}
