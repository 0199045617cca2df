package idem_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// statementCounter is a pgx tracer that counts the statements whose text
// contains match.
type statementCounter struct {
	match string
	n     atomic.Int64
}

func (s *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, s.match) {
		s.n.Add(1)
	}
	return ctx
}

func (s *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// insertExpired adds n expired keys (200-byte results, in 100 scopes) and
// live ones to db's keys table, and analyzes it.
func insertExpired(db *pgtest.DB, n, live int) {
	db.Exec(`INSERT INTO sqlock_idem (scope, key, fingerprint, result, expires_at)
		SELECT 'tenant-' || (g % 100), 'key-' || g, '\x00'::bytea, convert_to(repeat('r', 200), 'UTF8'), clock_timestamp() - interval '1 hour'
		FROM generate_series(1, $1) g`, n)
	db.Exec(`INSERT INTO sqlock_idem (scope, key, fingerprint, result, expires_at)
		SELECT 'live', 'key-' || g, '', '', clock_timestamp() + interval '1 hour' FROM generate_series(1, $1) g`, live)
	db.Exec(`ANALYZE sqlock_idem`)
}

// TestSweepDeletesExpiredKeysInShortBatches: 100,000 expired keys are
// swept while new keys keep being claimed: every expired key is deleted,
// live ones stay, and the sweep's statements — counted at the client and
// by the rows each one deleted on the server — each delete at most the
// batch size: 100 full batches and the short one that ends the sweep.
// Nothing here depends on speed; how long a statement runs on the server
// is BenchmarkSweepStatement's to report.
func TestSweepDeletesExpiredKeysInShortBatches(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	ctx := context.Background()
	const expired, live = 100_000, 1000
	insertExpired(db, expired, live)

	deletes := &statementCounter{match: "DELETE"}
	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = deletes
	sweeper, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sweeper.Close()

	// Writers claim fresh keys the whole time the sweep runs.
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
				err := pgx.BeginFunc(ctx, db.Pool(), func(tx pgx.Tx) error {
					_, err := idem.Do(ctx, tx, "writer", strconv.Itoa(w)+"-"+strconv.Itoa(i), nil,
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
	// The writers have claimed a key before the sweep starts, so that they
	// run beside it.
	for writes.Load() == 0 && !t.Failed() {
		time.Sleep(time.Millisecond)
	}
	var batches []int64
	n, err := idem.Sweep(ctx, sweeper, idem.WithBatchHook(func(deleted int64, _ time.Duration) {
		batches = append(batches, deleted)
	}))
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n != expired {
		t.Fatalf("swept %d keys, want %d", n, expired)
	}
	var sum int64
	for i, d := range batches {
		if d > idem.MaxSweepBatch {
			t.Fatalf("statement %d deleted %d keys, more than the batch of %d", i, d, idem.MaxSweepBatch)
		}
		sum += d
	}
	const want = expired/idem.MaxSweepBatch + 1 // the last, short, batch ends the sweep
	if sent := deletes.n.Load(); sent != int64(len(batches)) || len(batches) != want || sum != expired {
		t.Fatalf("%d sweeping statements sent, %d answered, deleting %d keys in all; want %d statements deleting %d",
			sent, len(batches), sum, want, expired)
	}
	if left := count(t, db, `SELECT count(*) FROM sqlock_idem WHERE expires_at <= clock_timestamp()`); left != 0 {
		t.Fatalf("%d expired keys left", left)
	}
	if n := count(t, db, `SELECT count(*) FROM sqlock_idem WHERE scope = 'live'`); n != live {
		t.Fatalf("%d live keys left, want %d", n, live)
	}
	if n := count(t, db, `SELECT count(*) FROM sqlock_idem WHERE scope = 'writer'`); int64(n) != writes.Load() {
		t.Fatalf("%d of the writers' %d keys left", n, writes.Load())
	}
	if n, err := idem.Sweep(ctx, db.SQL(), idem.WithBatch(10)); err != nil || n != 0 {
		t.Fatalf("second sweep (database/sql): %d, %v", n, err)
	}
}
