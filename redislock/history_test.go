package redislock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// The model: a lock whose tokens guard a fenced register. Histories
// recorded against real Redis and PostgreSQL are checked for
// linearizability against it.

type opKind uint8

const (
	opAcquire opKind = iota
	opHeld           // the holder asks its lock whether it is still trusted (Err() == nil)
	opWrite          // a fenced write of the register: … WHERE fence <= token
	opRead
	opRelease
)

type opIn struct {
	kind   opKind
	client int
	token  int64 // write
	value  int   // write
}

type opOut struct {
	ok    bool
	token int64 // acquire
	value int   // read
}

type lockState struct {
	holder   int   // client holding the lock, -1 if none
	maxToken int64 // the greatest token granted
	value    int
	fence    int64 // the register's fence: the token of its last write
	expiry   bool  // faults: a lock may end without its holder's release
}

// lockModel is the specification. Without faults it is a mutex: an
// acquisition needs the lock free, only the holder trusts its lock, and
// releases succeed. With faults a lock may end under its holder (then
// acquisitions need not wait, a holder may still trust its lock, and a
// release may fail). Always: a granted
// token is greater than every token granted before (tokens 0: a lock
// without one), and the register takes a write exactly when its token is
// at least the fence.
func lockModel(faults bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return lockState{holder: -1, expiry: faults} },
		Step: func(st, in, out any) (bool, any) {
			s, i, o := st.(lockState), in.(opIn), out.(opOut)
			switch i.kind {
			case opAcquire:
				if !o.ok {
					return true, s
				}
				if o.token != 0 && o.token <= s.maxToken || !s.expiry && s.holder != -1 {
					return false, s
				}
				s.holder, s.maxToken = i.client, max(s.maxToken, o.token)
				return true, s
			case opHeld:
				// With faults (a key lost under its holder) a holder may
				// trust its lock until its next renewal: only the fenced
				// writes protect the data then.
				return !o.ok || s.holder == i.client || s.expiry, s
			case opWrite:
				if o.ok != (i.token >= s.fence) {
					return false, s
				}
				if o.ok {
					s.value, s.fence = i.value, i.token
				}
				return true, s
			case opRead:
				return o.value == s.value, s
			case opRelease:
				if o.ok {
					if s.holder != i.client {
						return false, s
					}
					s.holder = -1
					return true, s
				}
				if !s.expiry {
					return false, s
				}
				if s.holder == i.client {
					s.holder = -1
				}
				return true, s
			}
			return false, s
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(opIn), out.(opOut)
			return fmt.Sprintf("c%d op%d tok=%d val=%d → ok=%t tok=%d val=%d", i.client, i.kind, i.token, i.value, o.ok, o.token, o.value)
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

// TestHistoriesAreLinearizableAgainstALockGuardingAFencedRegister: 4
// clients × 15 rounds of acquire, held?, fenced PostgreSQL write, read,
// release on one server — quiet, and with the key deleted behind the
// holders' backs now and then (as if each had been paused past its TTL) —
// are linearizable against the model.
func TestHistoriesAreLinearizableAgainstALockGuardingAFencedRegister(t *testing.T) {
	leakCheck(t)
	for _, faults := range []bool{false, true} {
		t.Run(map[bool]string{false: "quiet", true: "expiring-holders"}[faults], func(t *testing.T) {
			s := redistest.New(t, redistest.Options{})
			c := s.Client(t, nil)
			db := pgtest.New(t)
			db.Exec(`CREATE TABLE register (id int PRIMARY KEY, value int NOT NULL, fence bigint NOT NULL)`)
			db.Exec(`INSERT INTO register VALUES (1, 0, 0)`)
			sqlDB := db.SQL()
			ctx := context.Background()
			// Quiet runs may not lose a lock: a TTL no stall on a busy
			// machine reaches (the faulty run expires holders by its own
			// means, below).
			ttl := time.Minute
			lk := redislock.New(c, redislock.WithTimeout(time.Minute))
			rec := &recorder{base: time.Now()}
			const clients, rounds = 4, 15
			stop := make(chan struct{})
			var injector sync.WaitGroup
			if faults {
				injector.Go(func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(time.Duration(5+rand.IntN(20)) * time.Millisecond):
						}
						c.Del(ctx, "register")
					}
				})
			}
			var wg sync.WaitGroup
			for cl := range clients {
				wg.Go(func() {
					for r := range rounds {
						var l *redislock.Lock
						rec.do(cl, opIn{kind: opAcquire, client: cl}, func() opOut {
							var err error
							if l, err = lk.Acquire(ctx, "register", ttl); err != nil {
								return opOut{}
							}
							return opOut{ok: true, token: l.Token()}
						})
						if l == nil {
							continue
						}
						if faults { // the holder's work, during which its key may go
							time.Sleep(time.Duration(rand.IntN(30000)) * time.Microsecond)
						}
						rec.do(cl, opIn{kind: opHeld, client: cl}, func() opOut { return opOut{ok: l.Err() == nil} })
						v := cl*1000 + r + 1
						rec.do(cl, opIn{kind: opWrite, client: cl, token: l.Token(), value: v}, func() opOut {
							res, err := sqlDB.ExecContext(ctx, `UPDATE register SET value = $1, fence = $2 WHERE id = 1 AND fence <= $2`, v, l.Token())
							if err != nil {
								t.Error(err)
								return opOut{}
							}
							n, _ := res.RowsAffected()
							return opOut{ok: n == 1}
						})
						rec.do(cl, opIn{kind: opRead, client: cl}, func() opOut {
							var val int
							if err := sqlDB.QueryRowContext(ctx, `SELECT value FROM register WHERE id = 1`).Scan(&val); err != nil {
								t.Error(err)
							}
							return opOut{value: val}
						})
						rec.do(cl, opIn{kind: opRelease, client: cl}, func() opOut { return opOut{ok: l.Release(ctx) == nil} })
					}
				})
			}
			wg.Wait()
			close(stop)
			injector.Wait()
			if res := porcupine.CheckOperationsTimeout(lockModel(faults), rec.ops, time.Minute); res != porcupine.Ok {
				t.Fatalf("history of %d operations is %v", len(rec.ops), res)
			}
			refused := 0
			for _, op := range rec.ops {
				if op.Input.(opIn).kind == opWrite && !op.Output.(opOut).ok {
					refused++
				}
			}
			t.Logf("%d operations, %d fenced writes refused, linearizable", len(rec.ops), refused)
		})
	}
}

// TestTheModelRejectsOverlappingHolders: the checker is not vacuous — a
// second acquisition while the first holder still trusts its lock, and a
// write below the fence that succeeded, are both found.
func TestTheModelRejectsOverlappingHolders(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Input: opIn{kind: opAcquire, client: 0}, Output: opOut{ok: true, token: 1}, Call: 0, Return: 1},
		{ClientId: 1, Input: opIn{kind: opAcquire, client: 1}, Output: opOut{ok: true, token: 2}, Call: 2, Return: 3},
		{ClientId: 0, Input: opIn{kind: opHeld, client: 0}, Output: opOut{ok: true}, Call: 4, Return: 5},
	}
	if porcupine.CheckOperations(lockModel(false), ops) {
		t.Fatal("two holders at once passed the quiet model")
	}
	stale := []porcupine.Operation{
		{ClientId: 0, Input: opIn{kind: opWrite, client: 0, token: 2, value: 1}, Output: opOut{ok: true}, Call: 0, Return: 1},
		{ClientId: 1, Input: opIn{kind: opWrite, client: 1, token: 1, value: 2}, Output: opOut{ok: true}, Call: 2, Return: 3},
	}
	if porcupine.CheckOperations(lockModel(true), stale) {
		t.Fatal("a write below the fence passed")
	}
}

// TestRedlockHistoryWithServersRestartedWithoutPersistence records the
// known unsafe case as a history and checks it against the mutex model:
// A acquires on 5 servers, 3 restart, B acquires, A asks whether its lock
// is still trusted. Without persistence the checker finds the violation (A
// trusts its lock after B got it); with appendfsync always the history is
// linearizable.
func TestRedlockHistoryWithServersRestartedWithoutPersistence(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	for _, persist := range []bool{false, true} {
		servers := redistest.NewN(t, 5, redistest.Options{Persist: persist})
		r := redislock.NewRedlock(clients(t, servers))
		ttl := time.Minute // A's lock may not expire, at any speed
		rec := &recorder{base: time.Now()}
		var a *redislock.RedlockLock
		rec.do(0, opIn{kind: opAcquire, client: 0}, func() opOut {
			var err error
			if a, err = r.Acquire(ctx, "k", ttl); err != nil {
				t.Fatal(err)
			}
			return opOut{ok: true}
		})
		var wg sync.WaitGroup
		for _, s := range servers[:3] {
			wg.Go(func() {
				if err := s.Restart(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		var b *redislock.RedlockLock
		rec.do(1, opIn{kind: opAcquire, client: 1}, func() opOut {
			var err error
			b, err = r.TryAcquire(ctx, "k", ttl)
			return opOut{ok: err == nil}
		})
		rec.do(0, opIn{kind: opHeld, client: 0}, func() opOut { return opOut{ok: a.Err() == nil} })
		ok := porcupine.CheckOperations(lockModel(false), rec.ops)
		switch {
		case !persist && ok:
			t.Fatal("without persistence the history passed: Redlock's unsafe case did not show")
		case persist && !ok:
			t.Fatal("with appendfsync always the history is not linearizable")
		}
		t.Logf("persist=%t: linearizable=%t", persist, ok)
		if b != nil {
			b.Release(ctx)
		}
		a.Release(ctx)
	}
}
