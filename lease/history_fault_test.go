package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// unknownOut is the output of an operation whose outcome is unknown: the
// connection died after the request may have reached the server, so it
// may or may not have taken effect, at any time after it was called. It is
// recorded with a response time of infinity.
type unknownOut struct{}

// faultModel is lockModel with expiring leases, extended to operations of
// unknown outcome: each may have taken effect or not.
//   - an acquisition: not granted, or granted to a holder who never learned
//     of it (its token unknown; the lock then has no holder able to write);
//   - a guarded write: not committed, or committed (only if it could have
//     been: its writer held the latest lease);
//   - a release: nothing, or the lease ended (if it was still its holder's).
func faultModel() porcupine.Model {
	base := lockModel(true)
	return (&porcupine.NondeterministicModel{
		Init: func() []any { return []any{base.Init()} },
		Step: func(st, in, out any) []any {
			s, i := st.(lockState), in.(opIn)
			if _, ok := out.(unknownOut); !ok {
				if ok, next := base.Step(st, in, out); ok {
					return []any{next}
				}
				return nil
			}
			next := []any{s}
			switch i.kind {
			case opAcquire:
				t := s
				t.holder = -1
				next = append(next, t)
			case opWrite:
				if ok, t := base.Step(st, in, opOut{ok: true}); ok {
					next = append(next, t)
				}
			case opRelease:
				if ok, t := base.Step(st, in, opOut{ok: true}); ok {
					next = append(next, t)
				}
			}
			return next
		},
		DescribeOperation: func(in, out any) string {
			if _, ok := out.(unknownOut); ok {
				return base.DescribeOperation(in, opOut{}) + " (outcome unknown)"
			}
			return base.DescribeOperation(in, out)
		},
	}).ToModel()
}

// noEffect reports whether err certainly came before anything was sent
// (a refused connection, a server not accepting connections yet).
func noEffect(err error) bool {
	var ce *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &ce)
}

// recordFault records an operation that may end without a verdict: f
// returns the output, unknownOut{}, or nil for an operation that certainly
// did nothing (it is then left out of the history).
func (r *recorder) recordFault(client int, in opIn, f func() any) any {
	call := time.Since(r.base).Nanoseconds()
	out := f()
	ret := time.Since(r.base).Nanoseconds()
	if out == nil {
		return nil
	}
	if _, ok := out.(unknownOut); ok {
		ret = math.MaxInt64
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
	return out
}

// TestHistoriesUnderFaultsAreLinearizable records acquire, guarded fenced
// write, read and release of 4 clients while the server is restarted mid-run
// (fast shutdown), and while it crashes (immediate shutdown) and is started
// again; operations cut off by the fault are recorded as of unknown outcome.
// The history is linearizable against a lock guarding a fenced register.
// (TestFailoverWithSynchronousReplicationGrantsNoLeaseTwice checks such a
// history across a failover.)
func TestHistoriesUnderFaultsAreLinearizable(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	faults := []struct {
		name  string
		setup func(t *testing.T) (db *pgtest.DB, inject func() error)
	}{
		{"restart", func(t *testing.T) (*pgtest.DB, func() error) {
			c := pgtest.NewCluster(t, pgtest.Options{})
			return c.NewDB(t), func() error { return c.Restart(ctx) }
		}},
		{"crash", func(t *testing.T) (*pgtest.DB, func() error) {
			c := pgtest.NewCluster(t, pgtest.Options{})
			return c.NewDB(t), func() error {
				// SIGQUIT: PostgreSQL's immediate shutdown, a crash; WAL replayed at the start.
				if err := syscall.Kill(c.PID(), syscall.SIGQUIT); err != nil {
					return err
				}
				if err := c.Stop(); err != nil {
					return err
				}
				return c.Start(ctx)
			}
		}},
	}
	for _, fault := range faults {
		t.Run(fault.name, func(t *testing.T) {
			db, inject := fault.setup(t)
			ops, unknown := faultHistory(t, db, inject)
			res, info := porcupine.CheckOperationsVerbose(faultModel(), ops, 60*time.Second)
			if res != porcupine.Ok {
				if res == porcupine.Illegal {
					t.Log(describeHistory(info))
				}
				t.Fatalf("history of %d operations (%d of unknown outcome): %v", len(ops), unknown, res)
			}
			t.Logf("%d operations (%d of unknown outcome) linearizable across the %s", len(ops), unknown, fault.name)
		})
	}
}

// faultHistory records a history (historyClients) on db across a fault:
// after 20 rounds it calls inject, and goes on for 20 rounds more.
func faultHistory(t *testing.T, db *pgtest.DB, inject func() error) (ops []porcupine.Operation, unknownOps int) {
	if err := lease.Migrate(context.Background(), db.Pool()); err != nil {
		t.Fatal(err)
	}
	h := startHistory(t, db)
	h.waitRounds(t, 20)
	if err := inject(); err != nil {
		h.finish()
		t.Fatal(err)
	}
	h.waitRounds(t, 20)
	return h.finish()
}

// history is a running set of 4 clients that acquire the lease
// "register", write the register (a table of that name) in a guarded
// transaction fenced by their token, read it and release, in a loop,
// recording every operation; those cut off by a fault are of unknown
// outcome, those that certainly did nothing are left out.
type history struct {
	rec     *recorder
	rounds  atomic.Int32 // rounds that got a lease
	unknown atomic.Int32
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startHistory creates the register on db (whose leases table must
// exist) and starts the clients.
func startHistory(t *testing.T, db *pgtest.DB) *history {
	ctx := context.Background()
	db.Exec(`CREATE TABLE register (id int PRIMARY KEY, value int NOT NULL, fence bigint NOT NULL)`)
	db.Exec(`INSERT INTO register VALUES (1, 0, 0)`)
	pool := openPool(t, db.DSN)
	ttl := max(300*time.Millisecond, 30*db.Latency())
	m := lease.New(pool, lease.WithTimeout(10*time.Second))
	h := &history{rec: &recorder{base: time.Now()}, stop: make(chan struct{})}
	rec, unknown := h.rec, &h.unknown
	const clients = 4
	for c := range clients {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for r := 0; ; r++ {
				select {
				case <-h.stop:
					return
				default:
				}
				var l *lease.Lease
				rec.recordFault(c, opIn{kind: opAcquire, client: c}, func() any {
					var err error
					l, err = m.Acquire(ctx, "register", ttl)
					switch {
					case err == nil:
						return opOut{ok: true, token: l.Token()}
					case noEffect(err):
						return nil
					}
					unknown.Add(1)
					return unknownOut{}
				})
				if l == nil {
					time.Sleep(5 * time.Millisecond) // a retry's pause while the server is away
					continue
				}
				h.rounds.Add(1)
				v := c*100000 + r + 1
				rec.recordFault(c, opIn{kind: opWrite, client: c, token: l.Token(), value: v}, func() any {
					var fenced bool
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						if err := l.Guard(ctx, tx); err != nil {
							return err
						}
						tag, err := tx.Exec(ctx, `UPDATE register SET value = $1, fence = $2 WHERE id = 1 AND fence <= $2`, v, l.Token())
						if err == nil && tag.RowsAffected() != 1 {
							fenced = true
							return errors.New("fenced out")
						}
						return err
					})
					switch {
					case err == nil:
						return opOut{ok: true}
					case fenced, errors.Is(err, lease.ErrLost):
						return opOut{ok: false} // refused: the transaction was rolled back
					case noEffect(err):
						return nil
					}
					unknown.Add(1)
					return unknownOut{}
				})
				rec.recordFault(c, opIn{kind: opRead, client: c}, func() any {
					var val int
					if err := pool.QueryRow(ctx, `SELECT value FROM register WHERE id = 1`).Scan(&val); err != nil {
						return nil // a read that failed says nothing
					}
					return opOut{value: val}
				})
				rec.recordFault(c, opIn{kind: opRelease, client: c, token: l.Token()}, func() any {
					err := l.Release(ctx)
					switch {
					case err == nil:
						return opOut{ok: true}
					case errors.Is(err, lease.ErrNotHeld):
						return opOut{ok: false}
					case noEffect(err):
						return nil
					}
					unknown.Add(1)
					return unknownOut{}
				})
			}
		}()
	}
	return h
}

// waitRounds waits until the clients have got n more leases.
func (h *history) waitRounds(t *testing.T, n int32) {
	t.Helper()
	target := h.rounds.Load() + n
	waitFor(t, fmt.Sprintf("%d more rounds of the history's clients", n), func() bool { return h.rounds.Load() >= target })
}

// finish stops the clients and returns the history and the number of
// operations of unknown outcome in it.
func (h *history) finish() ([]porcupine.Operation, int) {
	close(h.stop)
	h.wg.Wait()
	return h.rec.ops, int(h.unknown.Load())
}

// describeHistory is the partial linearizations porcupine found, for the
// log of a failing run.
func describeHistory(info porcupine.LinearizationInfo) string {
	var b []byte
	for _, part := range info.PartialLinearizationsOperations() {
		for _, lin := range part {
			b = append(b, '[')
			for _, op := range lin {
				b = append(b, []byte(faultModel().DescribeOperation(op.Input, op.Output))...)
				b = append(b, "; "...)
			}
			b = append(b, "]\n"...)
		}
	}
	return string(b)
}

// TestTheFaultModelAllowsOnlyWhatAnUnknownOutcomeCouldHaveDone: an
// unknown write may explain a read of its value, and an unknown
// acquisition a holder's refused write, but an unknown write by a holder
// whose lease was superseded explains nothing.
func TestTheFaultModelAllowsOnlyWhatAnUnknownOutcomeCouldHaveDone(t *testing.T) {
	op := func(c int, call, ret int64, in opIn, out any) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
	}
	inf := int64(math.MaxInt64)
	written := []porcupine.Operation{
		op(0, 0, 1, opIn{kind: opAcquire, client: 0}, opOut{ok: true, token: 5}),
		op(0, 2, inf, opIn{kind: opWrite, client: 0, token: 5, value: 7}, unknownOut{}),
		op(1, 10, 11, opIn{kind: opRead, client: 1}, opOut{value: 7}),
		op(1, 12, 13, opIn{kind: opRead, client: 1}, opOut{value: 7}),
	}
	if !porcupine.CheckOperations(faultModel(), written) {
		t.Fatal("a read of a write of unknown outcome was rejected")
	}
	unwritten := append([]porcupine.Operation{}, written[:2]...)
	unwritten = append(unwritten, op(1, 10, 11, opIn{kind: opRead, client: 1}, opOut{value: 0}))
	if !porcupine.CheckOperations(faultModel(), unwritten) {
		t.Fatal("a write of unknown outcome that did not happen was rejected")
	}
	flipflop := append(append([]porcupine.Operation{}, written[:3]...),
		op(1, 12, 13, opIn{kind: opRead, client: 1}, opOut{value: 0}))
	if porcupine.CheckOperations(faultModel(), flipflop) {
		t.Fatal("a write seen and then unseen was accepted")
	}
	ghost := []porcupine.Operation{
		op(0, 0, 1, opIn{kind: opAcquire, client: 0}, opOut{ok: true, token: 5}),
		op(1, 2, inf, opIn{kind: opAcquire, client: 1}, unknownOut{}),
		op(0, 4, 5, opIn{kind: opWrite, client: 0, token: 5, value: 1}, opOut{ok: false}),
	}
	if !porcupine.CheckOperations(faultModel(), ghost) {
		t.Fatal("a refused write after an acquisition of unknown outcome was rejected")
	}
	superseded := []porcupine.Operation{
		op(0, 0, 1, opIn{kind: opAcquire, client: 0}, opOut{ok: true, token: 5}),
		op(1, 2, 3, opIn{kind: opAcquire, client: 1}, opOut{ok: true, token: 6}),
		op(0, 4, inf, opIn{kind: opWrite, client: 0, token: 5, value: 1}, unknownOut{}),
		op(1, 6, 7, opIn{kind: opRead, client: 1}, opOut{value: 1}),
	}
	if porcupine.CheckOperations(faultModel(), superseded) {
		t.Fatal("a superseded holder's write of unknown outcome explained a read")
	}
}
