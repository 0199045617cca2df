package pgtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// LatencyWatch samples the server's round trip while a test waits: a
// SELECT 1 every few milliseconds on a connection of its own, keeping the
// slowest. A server that stalls for a while — starved of CPU, paging, a
// backend blocked — shows as one slow sample, so that a bound on when the
// server answers can allow for what the test measured rather than fail a
// promise that holds only while the server answers (the way package
// schedlag allows for late timers on the client's side).
type LatencyWatch struct {
	tb      testing.TB
	slowest atomic.Int64 // ns
	err     error        // why sampling stopped early; read after done
	stop    chan struct{}
	done    chan struct{}
}

// WatchLatency starts a LatencyWatch on d (directly, not through a proxy).
func (d *DB) WatchLatency() *LatencyWatch {
	d.tb.Helper()
	return WatchLatencyAt(d.tb, d.DSN)
}

// WatchLatencyAt starts a LatencyWatch on the server dsn names: a pooler
// in front of it (PgBouncer), say, whose own stalls then count too. It
// sends SELECT 1 in the simple protocol, which every pool mode serves.
func WatchLatencyAt(tb testing.TB, dsn string) *LatencyWatch {
	tb.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	w := &LatencyWatch{tb: tb, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer conn.Close(ctx)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			start := time.Now()
			if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
				w.err = err // a watch that stopped measuring must not pass for a fast server
				return
			}
			if took := int64(time.Since(start)); took > w.slowest.Load() {
				w.slowest.Store(took)
			}
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// Stop ends the sampling and returns the slowest round trip seen; it
// fails the test if a sample failed (the watch would have stopped
// measuring the stall it is there to see). Call it from the test's
// goroutine; it is safe to call more than once.
func (w *LatencyWatch) Stop() time.Duration {
	w.tb.Helper()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	if w.err != nil {
		w.tb.Fatalf("pgtest: the latency watch's SELECT 1 failed: %v", w.err)
	}
	return time.Duration(w.slowest.Load())
}
