package idem_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/idem"
)

// statementTimer is a pgx tracer that keeps the longest statement seen
// whose text contains match, and counts them.
type statementTimer struct {
	match   string
	mu      sync.Mutex
	longest time.Duration
	n       int
}

type startKey struct{}

func (s *statementTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, s.match) {
		return ctx
	}
	return context.WithValue(ctx, startKey{}, time.Now())
}

func (s *statementTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if start, ok := ctx.Value(startKey{}).(time.Time); ok {
		d := time.Since(start)
		s.mu.Lock()
		s.longest = max(s.longest, d)
		s.n++
		s.mu.Unlock()
	}
}

func (s *statementTimer) result() (time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.longest, s.n
}

// TestSweepDeletesExpiredKeysInShortBatches: 100,000 expired keys are
// swept in batches of at most 1,000 while new keys keep being written;
// every sweeping statement (and so every lock it holds) runs under 100 ms
// on the server, plus 50 × the round-trip latency measured before and
// after (the worse) for a busy machine (the client's times are logged too); live keys stay.
func TestSweepDeletesExpiredKeysInShortBatches(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	const expired = 100_000
	db.Exec(`INSERT INTO sqlock_idem (scope, key, fingerprint, result, expires_at)
		SELECT 'tenant-' || (g % 100), 'key-' || g, '\x00'::bytea, convert_to(repeat('r', 200), 'UTF8'), clock_timestamp() - interval '1 hour'
		FROM generate_series(1, $1) g`, expired)
	db.Exec(`INSERT INTO sqlock_idem (scope, key, fingerprint, result, expires_at)
		SELECT 'live', 'key-' || g, '', '', clock_timestamp() + interval '1 hour' FROM generate_series(1, 1000) g`)
	db.Exec(`ANALYZE sqlock_idem`)

	sweepTimer := &statementTimer{match: "DELETE"}
	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = sweepTimer
	sweeper, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sweeper.Close()

	// Writers claim fresh keys the whole time the sweep runs.
	writeTimer := &statementTimer{match: "INSERT"}
	cfg2 := cfg.Copy()
	cfg2.ConnConfig.Tracer = writeTimer
	writers, err := pgxpool.NewWithConfig(ctx, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	defer writers.Close()
	stop := make(chan struct{})
	var writes atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := pgx.BeginFunc(ctx, writers, func(tx pgx.Tx) error {
					_, err := idem.Do(ctx, tx, "writer", time.Now().Format(time.RFC3339Nano)+"-"+string(rune('a'+w))+"-"+strconv.Itoa(i), nil,
						func(context.Context) (int, error) { return i, nil })
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	// A statement's time on a starved machine is stretched by how long the
	// server waits for a core: the bound allows for the latency measured
	// now (on an idle machine it is 100 µs to 1 ms, and the bound 100 ms),
	// and for a stall of the server while the sweep ran, which a SELECT 1
	// sampled all along sees too (one DELETE once took 2.2 s beside CI's
	// other packages). A statement slow for a reason of its own — a long
	// batch, a lock wait — is not excused: the SELECT 1 does not wait for
	// it.
	latency := db.Latency()
	stalls := db.WatchLatency()
	defer stalls.Stop()
	var server []time.Duration
	start := time.Now()
	n, err := idem.Sweep(ctx, sweeper, idem.WithBatchHook(func(deleted int64, took time.Duration) {
		if deleted > idem.MaxSweepBatch {
			t.Errorf("a batch deleted %d keys", deleted)
		}
		server = append(server, took)
	}))
	elapsed := time.Since(start)
	stall := stalls.Stop()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n != expired {
		t.Fatalf("swept %d keys, want %d", n, expired)
	}
	longest, batches := sweepTimer.result()
	wlongest, wn := writeTimer.result()
	latency = max(latency, db.Latency()) // the load may have changed meanwhile
	bound := 100*time.Millisecond + 50*latency + 2*stall
	serverLongest := slices.Max(server)
	t.Logf("latency %v, slowest SELECT 1 during the sweep %v; swept %d keys in %v: %d statements, longest %v on the server (%v at the client, round trip and scheduling included); %d claims meanwhile, longest %v at the client",
		latency, stall, n, elapsed, batches, serverLongest, longest, writes.Load(), wlongest)
	if batches < expired/idem.MaxSweepBatch || len(server) != batches {
		t.Fatalf("%d statements (%d timed) for %d keys: batches larger than %d", batches, len(server), expired, idem.MaxSweepBatch)
	}
	if serverLongest >= bound {
		t.Fatalf("the longest sweeping statement ran %v on the server, want < %v = 100 ms + 50 × latency %v + 2 × the slowest SELECT 1 meanwhile %v (all: %v)",
			serverLongest, bound, latency, stall, server)
	}
	if writes.Load() == 0 || wn == 0 {
		t.Fatal("no writes ran during the sweep")
	}
	if left := count(t, db, `SELECT count(*) FROM sqlock_idem WHERE expires_at <= clock_timestamp()`); left != 0 {
		t.Fatalf("%d expired keys left", left)
	}
	if live := count(t, db, `SELECT count(*) FROM sqlock_idem WHERE scope = 'live'`); live != 1000 {
		t.Fatalf("%d live keys left, want 1000", live)
	}
	if n, err := idem.Sweep(ctx, db.SQL(), idem.WithBatch(10)); err != nil || n != 0 {
		t.Fatalf("second sweep (database/sql): %d, %v", n, err)
	}
}
