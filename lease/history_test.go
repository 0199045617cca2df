package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/lease"
)

// The model: a lock guarding a fenced register. Histories recorded
// against real PostgreSQL are checked for linearizability against it.

type opKind uint8

const (
	opAcquire opKind = iota
	opWrite          // a guarded transaction writing the register, fenced by the token
	opRead
	opRelease
)

type opIn struct {
	kind   opKind
	client int
	token  int64 // write, release
	value  int   // write
}

type opOut struct {
	ok    bool
	token int64 // acquire
	value int   // read
}

type lockState struct {
	holder         int   // client holding the lock, -1 if none
	token          int64 // the holder's token
	maxToken       int64 // the greatest token granted
	value          int
	fence          int64 // the register's fence: the token of its last write
	expiryPossible bool  // faults: a lease may expire without its holder's release
}

// lockModel is the specification. A granted token is greater than every
// token granted before. A write succeeds only for the current holder with
// the latest token (no newer lease was granted before it committed). A
// confirmed release is the holder's. Without faults, leases never expire:
// acquiring needs the lock free, and writes and releases never fail.
func lockModel(faults bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return lockState{holder: -1, expiryPossible: faults} },
		Step: func(st, in, out any) (bool, any) {
			s, i, o := st.(lockState), in.(opIn), out.(opOut)
			switch i.kind {
			case opAcquire:
				if !o.ok {
					return true, s // timed out: nothing happened
				}
				if o.token <= s.maxToken || (!s.expiryPossible && s.holder != -1) {
					return false, s
				}
				s.holder, s.token, s.maxToken = i.client, o.token, o.token
				return true, s
			case opWrite:
				if !o.ok {
					return s.expiryPossible, s // only a lost lease refuses
				}
				if s.holder != i.client || s.token != i.token || i.token != s.maxToken || i.token < s.fence {
					return false, s
				}
				s.value, s.fence = i.value, i.token
				return true, s
			case opRead:
				return o.value == s.value, s
			case opRelease:
				held := s.holder == i.client && s.token == i.token && s.maxToken == i.token
				if o.ok {
					if !held {
						return false, s
					}
					s.holder = -1
					return true, s
				}
				if !s.expiryPossible {
					return false, s
				}
				if held { // it had expired
					s.holder = -1
				}
				return true, s
			}
			return false, s
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(opIn), out.(opOut)
			return fmt.Sprintf("c%d %v tok=%d val=%d → ok=%t tok=%d val=%d", i.client, i.kind, i.token, i.value, o.ok, o.token, o.value)
		},
	}
}

// recorder collects a history; safe for concurrent use.
type recorder struct {
	mu   sync.Mutex
	base time.Time
	ops  []porcupine.Operation
}

func (r *recorder) do(client int, in opIn, f func() opOut) opOut {
	call := time.Since(r.base).Nanoseconds()
	out := f()
	ret := time.Since(r.base).Nanoseconds()
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
	return out
}

func TestHistoriesAreLinearizableAgainstALockGuardingAFencedRegister(t *testing.T) {
	leakCheck(t)
	for _, faults := range []bool{false, true} {
		t.Run(map[bool]string{false: "quiet", true: "expiring-holders"}[faults], func(t *testing.T) {
			db := newDB(t)
			db.Exec(`CREATE TABLE register (id int PRIMARY KEY, value int NOT NULL, fence bigint NOT NULL)`)
			db.Exec(`INSERT INTO register VALUES (1, 0, 0)`)
			pool := openPool(t, db.DSN)
			conn := admin(t, db)
			ctx := context.Background()
			// The quiet model has no expiry: a minute-long lease, held for
			// milliseconds, is never renewed or lost in the run, at any speed.
			// With faults the injector ends leases on the server.
			ttl := roomyTTL
			m := lease.New(pool, lease.WithTimeout(time.Minute))
			rec := &recorder{base: time.Now()}
			const clients, rounds = 4, 15
			stop := make(chan struct{})
			var injector sync.WaitGroup
			if faults {
				// The fault: now and then the current lease expires on the
				// server, as if its holder had been paused past its TTL. The
				// injector announces it on the table's channel: a real
				// waiter knows the true expiry and wakes for it, where one
				// that read a minute-long TTL would sleep until the safety
				// poll (a second per refused write, 22 s a run).
				injector.Add(1)
				go func() {
					defer injector.Done()
					for {
						select {
						case <-stop:
							return
						case <-time.After(time.Duration(5+rand.IntN(20)) * time.Millisecond):
						}
						conn.Exec(ctx, `WITH x AS (UPDATE sqlock_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE name = 'register' RETURNING name)
SELECT pg_notify('sqlock_leases', name) FROM x`)
					}
				}()
			}
			var wg sync.WaitGroup
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						var l *lease.Lease
						rec.do(c, opIn{kind: opAcquire, client: c}, func() opOut {
							var err error
							l, err = m.Acquire(ctx, "register", ttl)
							if err != nil {
								return opOut{}
							}
							return opOut{ok: true, token: l.Token()}
						})
						if l == nil {
							continue
						}
						v := c*1000 + r + 1
						if faults { // the holder's work, during which its lease may expire
							time.Sleep(time.Duration(rand.IntN(8000)) * time.Microsecond)
						}
						rec.do(c, opIn{kind: opWrite, client: c, token: l.Token(), value: v}, func() opOut {
							err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
								if err := l.Guard(ctx, tx); err != nil {
									return err
								}
								tag, err := tx.Exec(ctx, `UPDATE register SET value = $1, fence = $2 WHERE id = 1 AND fence <= $2`, v, l.Token())
								if err == nil && tag.RowsAffected() != 1 {
									err = errors.New("fenced out")
								}
								return err
							})
							return opOut{ok: err == nil}
						})
						rec.do(c, opIn{kind: opRead, client: c}, func() opOut {
							var val int
							if err := pool.QueryRow(ctx, `SELECT value FROM register WHERE id = 1`).Scan(&val); err != nil {
								t.Error(err)
							}
							return opOut{value: val}
						})
						rec.do(c, opIn{kind: opRelease, client: c, token: l.Token()}, func() opOut {
							err := l.Release(ctx)
							if err != nil && !errors.Is(err, lease.ErrNotHeld) {
								t.Error(err)
							}
							return opOut{ok: err == nil}
						})
					}
				}()
			}
			wg.Wait()
			close(stop)
			injector.Wait()
			refused := 0
			for _, op := range rec.ops {
				if in := op.Input.(opIn); in.kind == opWrite && !op.Output.(opOut).ok {
					refused++
				}
			}
			res := porcupine.CheckOperationsTimeout(lockModel(faults), rec.ops, 30*time.Second)
			if res != porcupine.Ok {
				t.Fatalf("history of %d operations: %v", len(rec.ops), res)
			}
			t.Logf("%d operations linearizable; %d guarded writes refused", len(rec.ops), refused)
			if faults && refused == 0 {
				t.Fatal("no write was refused: the faults did not reach a holder (expected about one in four)")
			}
		})
	}
}

func TestTheModelRejectsAStaleWrite(t *testing.T) {
	op := func(c int, call, ret int64, in opIn, out opOut) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
	}
	history := []porcupine.Operation{
		op(0, 0, 1, opIn{kind: opAcquire, client: 0}, opOut{ok: true, token: 5}),
		op(1, 2, 3, opIn{kind: opAcquire, client: 1}, opOut{ok: true, token: 6}), // 0's lease expired
		op(1, 4, 5, opIn{kind: opWrite, client: 1, token: 6, value: 1}, opOut{ok: true}),
		op(0, 6, 7, opIn{kind: opWrite, client: 0, token: 5, value: 2}, opOut{ok: true}), // the paused holder's write
	}
	if porcupine.CheckOperations(lockModel(true), history) {
		t.Fatal("a write with a superseded token was accepted by the model")
	}
	history[3].Output = opOut{ok: false}
	if !porcupine.CheckOperations(lockModel(true), history) {
		t.Fatal("the refused stale write was rejected by the model")
	}
	if porcupine.CheckOperations(lockModel(false), history[:2]) {
		t.Fatal("without faults, a second holder was accepted by the model")
	}
}
