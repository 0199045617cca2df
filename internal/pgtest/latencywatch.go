package pgtest

import (
	"context"
	"sync/atomic"
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
	slowest atomic.Int64 // ns
	stop    chan struct{}
	done    chan struct{}
}

// WatchLatency starts a LatencyWatch on d (directly, not through a proxy).
func (d *DB) WatchLatency() *LatencyWatch {
	d.tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.DSN)
	if err != nil {
		d.tb.Fatalf("pgtest: %v", err)
	}
	w := &LatencyWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer conn.Close(ctx)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			start := time.Now()
			if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
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

// Stop ends the sampling and returns the slowest round trip seen. It is
// safe to call more than once.
func (w *LatencyWatch) Stop() time.Duration {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return time.Duration(w.slowest.Load())
}
