package locktest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sqlock/sqlock"
)

// The operations of a history: a client acquires the lock, may suffer the
// backend's fault on it, reads and writes the register, and releases.
type opKind uint8

const (
	opAcquire opKind = iota
	opLose           // the backend's fault on the client's own lock (Harness.Lose)
	opRead
	opWrite // fenced by the token where the backend is fenced
	opRelease
)

var opNames = [...]string{"acquire", "lose", "read", "write", "release"}

func (k opKind) String() string { return opNames[k] }

type opIn struct {
	kind   opKind
	client int
	token  int64 // write, release: the client's token
	value  int   // write
}

type opOut struct {
	ok    bool
	token int64 // acquire
	value int   // read
}

// histState is the model's state: the lock and the register it guards.
type histState struct {
	holder   int   // the client holding the lock, -1 if none
	token    int64 // the holder's token
	maxToken int64 // the greatest token granted
	lost     int   // the client whose lock the fault took and nobody took since, -1 if none
	value    int   // the register
	fence    int64 // the token of the register's last write
}

// historyModel is the specification: a lock guarding a register.
//   - An acquisition is granted only while nobody holds the lock, with a
//     token (fenced) greater than every token granted before.
//   - The fault takes the lock from its holder: nobody holds it then.
//   - A fenced write succeeds exactly when its token is at least the
//     register's fence; an unfenced write always does (which is why a lock
//     without tokens cannot stop a holder that lost it).
//   - A release succeeds only for the lock's holder — or for the holder
//     whose lock the fault took while nobody has taken it since (ending
//     a lock nobody holds harms nobody); it fails only for one whose lock
//     is no longer its own.
//   - A read returns the last write.
func historyModel(fenced bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return histState{holder: -1, lost: -1} },
		Step: func(st, in, out any) (bool, any) {
			s, i, o := st.(histState), in.(opIn), out.(opOut)
			switch i.kind {
			case opAcquire:
				if !o.ok {
					return true, s // the wait ran out: nothing happened
				}
				if s.holder != -1 || fenced && o.token <= s.maxToken {
					return false, s
				}
				s.holder, s.token, s.lost = i.client, o.token, -1
				s.maxToken = max(s.maxToken, o.token)
				return true, s
			case opLose:
				if s.holder == i.client {
					s.holder, s.lost = -1, i.client
				}
				return true, s
			case opRead:
				return o.value == s.value, s
			case opWrite:
				if fenced && o.ok != (i.token >= s.fence) || !fenced && !o.ok {
					return false, s
				}
				if o.ok {
					s.value, s.fence = i.value, i.token
				}
				return true, s
			case opRelease:
				held := s.holder == i.client && (!fenced || s.token == i.token)
				switch {
				case o.ok && held:
					s.holder = -1
					return true, s
				case o.ok:
					if s.holder != -1 || s.lost != i.client {
						return false, s
					}
					s.lost = -1
					return true, s
				default:
					return !held, s
				}
			}
			return false, s
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(opIn), out.(opOut)
			return fmt.Sprintf("c%d %v tok=%d val=%d → ok=%t tok=%d val=%d", i.client, i.kind, i.token, i.value, o.ok, o.token, o.value)
		},
	}
}

// register is the data the lock protects, in the test process: a value
// and, for fenced writes, the token of the last write.
type register struct {
	mu    sync.Mutex
	value int
	fence int64
}

func (r *register) read() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value
}

// write sets the value; a fenced write only if token is at least the
// fence, as the fenced writes of versioned, sqlxhelpers and gormplugin do.
func (r *register) write(fenced bool, token int64, v int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fenced && token < r.fence {
		return false
	}
	r.value, r.fence = v, token
	return true
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

// testHistory: 4 clients, each with its own Acquirer, take one name 12
// times each, read the register and write it (fenced by their token where
// the backend is fenced) and release; in about a third of the rounds the
// holder suffers the backend's fault (Lose) first and goes on as a holder
// that has not noticed yet would, after a pause in which others take the
// lock. The history is checked for linearizability against historyModel:
// no grant while the lock is held, tokens increasing, a stale holder's
// fenced write refused once a newer holder wrote, releases owner-checked.
// The locks' TTL is a minute and their holds milliseconds, so no lock is
// lost but by the fault, at any speed.
func testHistory(t *testing.T, s *suite) {
	ctx := context.Background()
	const clients, rounds = 4, 12
	fenced := s.b.Caps.Fenced
	name := s.name("history")
	h := NewHistory(fenced)
	reg, rec := &h.reg, &h.rec
	var faults, refused int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range clients {
		acq := s.acquirer(Options{})
		wg.Go(func() {
			for r := range rounds {
				var lk sqlock.Lock
				rec.do(c, opIn{kind: opAcquire, client: c}, func() opOut {
					var err error
					if lk, err = acq.Acquire(ctx, name); err != nil {
						t.Errorf("client %d: Acquire: %v", c, err)
						return opOut{}
					}
					return opOut{ok: true, token: tokenOf(lk)}
				})
				if lk == nil {
					continue
				}
				tok := tokenOf(lk)
				if rand.IntN(3) == 0 {
					rec.do(c, opIn{kind: opLose, client: c}, func() opOut {
						if err := s.h.Lose(ctx, name, lk); err != nil {
							t.Errorf("client %d: the backend's Lose: %v", c, err)
						}
						return opOut{ok: true}
					})
					mu.Lock()
					faults++
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // others may take the lock now
				}
				rec.do(c, opIn{kind: opRead, client: c}, func() opOut { return opOut{ok: true, value: reg.read()} })
				v := c*1000 + r + 1
				rec.do(c, opIn{kind: opWrite, client: c, token: tok, value: v}, func() opOut {
					ok := reg.write(fenced, tok, v)
					if !ok {
						mu.Lock()
						refused++
						mu.Unlock()
					}
					return opOut{ok: ok}
				})
				rec.do(c, opIn{kind: opRelease, client: c, token: tok}, func() opOut {
					return opOut{ok: lk.Release(ctx) == nil}
				})
			}
		})
	}
	wg.Wait()
	h.Check(t)
	t.Logf("%d operations linearizable: %d faults, %d stale writes fenced out", len(rec.ops), faults, refused)
}

// History is a history of clients of one lock guarding a register, checked
// against the model of the conformance suite's history test: no grant
// while the lock is held, tokens (fenced) greater than every earlier one,
// a stale holder's fenced write refused once a newer holder wrote,
// releases owner-checked. A backend's own fault tests record theirs with
// it: the faults its Harness cannot inflict (a member killed, a
// partition, a paused process). Its methods are safe for concurrent use;
// each runs its function between the operation's call and return.
type History struct {
	fenced bool
	rec    recorder
	reg    register
}

// NewHistory returns an empty History of a lock whose tokens are fencing
// tokens (fenced) or not.
func NewHistory(fenced bool) *History {
	return &History{fenced: fenced, rec: recorder{base: time.Now()}}
}

// Acquire records client's acquisition: granted if acquire returns a lock,
// with the lock's token; not granted (a wait that ran out) otherwise.
func (h *History) Acquire(client int, acquire func() (sqlock.Lock, error)) (sqlock.Lock, error) {
	var lk sqlock.Lock
	var err error
	h.rec.do(client, opIn{kind: opAcquire, client: client}, func() opOut {
		if lk, err = acquire(); err != nil || lk == nil {
			return opOut{}
		}
		return opOut{ok: true, token: tokenOf(lk)}
	})
	return lk, err
}

// Lose records that a fault took client's lock from it, at some point
// while lost runs, if lost returns true: call it when the lock is granted,
// with a lost that returns true once the holder has noticed the loss (its
// Lost fired), false once the holder is done with a lock it did not lose
// (nothing is recorded then).
func (h *History) Lose(client int, lost func() bool) {
	call := time.Since(h.rec.base).Nanoseconds()
	if !lost() {
		return
	}
	ret := time.Since(h.rec.base).Nanoseconds()
	h.rec.mu.Lock()
	h.rec.ops = append(h.rec.ops, porcupine.Operation{ClientId: client, Input: opIn{kind: opLose, client: client}, Call: call, Output: opOut{ok: true}, Return: ret})
	h.rec.mu.Unlock()
}

// Read records client's read of the History's register.
func (h *History) Read(client int) int {
	return h.rec.do(client, opIn{kind: opRead, client: client}, func() opOut {
		return opOut{ok: true, value: h.reg.read()}
	}).value
}

// Write records client's write of value with its lock's token: write does
// it where the data is (a fenced PostgreSQL row) and says whether it
// succeeded; a nil write writes the History's register (fenced by the
// token where the History is).
func (h *History) Write(client int, token int64, value int, write func() bool) bool {
	if write == nil {
		write = func() bool { return h.reg.write(h.fenced, token, value) }
	}
	return h.rec.do(client, opIn{kind: opWrite, client: client, token: token, value: value}, func() opOut {
		return opOut{ok: write()}
	}).ok
}

// Release records client's release of the lock of token: succeeded if
// release returns nil.
func (h *History) Release(client int, token int64, release func() error) error {
	var err error
	h.rec.do(client, opIn{kind: opRelease, client: client, token: token}, func() opOut {
		err = release()
		return opOut{ok: err == nil}
	})
	return err
}

// Check fails t unless the history is linearizable against the model,
// logging every operation of an illegal one.
func (h *History) Check(t testing.TB) {
	t.Helper()
	h.rec.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.rec.ops...)
	h.rec.mu.Unlock()
	model := historyModel(h.fenced)
	if res := porcupine.CheckOperationsTimeout(model, ops, time.Minute); res != porcupine.Ok {
		if res == porcupine.Illegal {
			for _, op := range ops {
				t.Logf("[%d, %d] %s", op.Call, op.Return, model.DescribeOperation(op.Input, op.Output))
			}
		}
		t.Fatalf("a history of %d operations: %v against a lock guarding a register", len(ops), res)
	}
}
