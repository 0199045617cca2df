package matrix

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/sqlock/sqlock"
)

// LockName is the name of key's lock in cell c: cells never share one.
func LockName(c *Cell, key string) string { return "matrix:" + c.State.Schema + ":" + key }

// Guarded is the operation of a lock row: the workload's unguarded body
// (State.Apply) on q under the lock of key (LockName) taken from locks, its
// write fenced with the lock's token when fenced (the lock must then be a
// sqlock.Fenced). The release's error is not the operation's: the write has
// happened or not by then, and the workload's check says which.
func Guarded(c *Cell, q Querier, locks sqlock.Acquirer, fenced bool) ActorFunc {
	return func(ctx context.Context, key string) (Result, error) {
		l, err := locks.Acquire(ctx, LockName(c, key))
		if err != nil {
			return 0, err
		}
		defer l.Release(context.WithoutCancel(ctx))
		var token int64
		if fenced {
			token = l.(sqlock.Fenced).Token()
		}
		return c.State.Apply(ctx, q, key, token)
	}
}

// PauseBeforeWrite is q with pause called once, before its first
// ExecContext: State.Apply's read has been scanned then and its write not
// sent — the window a lock exists to guard, where a fault placed by
// construction (a pause, a cut, a partition) gives each verdict from what
// the mechanism does, not from the scheduler.
func PauseBeforeWrite(q Querier, pause func(ctx context.Context)) Querier {
	return &pausing{Querier: q, pause: pause}
}

type pausing struct {
	Querier
	pause func(ctx context.Context)
	once  sync.Once
}

func (p *pausing) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	p.once.Do(func() { p.pause(ctx) })
	return p.Querier.ExecContext(ctx, query, args...)
}

// Held is an operation that Hold started and holds at its pause point.
type Held struct {
	paused, resume, done chan struct{}
	once                 sync.Once
	r                    Result
	err                  error
}

// Hold runs op in a goroutine — an operation that calls pause once, at the
// point it is to be held (PauseBeforeWrite places it between a read and
// its write) — and returns once op has reached it: the fault goes there.
// It is an error if op ends first (a refusal, an error) or ctx does; op
// has then ended or been let go.
func Hold(ctx context.Context, op func(ctx context.Context, pause func(context.Context)) (Result, error)) (*Held, error) {
	h := &Held{paused: make(chan struct{}), resume: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.r, h.err = op(ctx, func(ctx context.Context) {
			close(h.paused)
			select {
			case <-h.resume:
			case <-ctx.Done():
			}
		})
	}()
	select {
	case <-h.paused:
		return h, nil
	case <-h.done:
		return nil, fmt.Errorf("the holder ended before its pause point (%v, %v)", h.r, h.err)
	case <-ctx.Done():
		h.Resume()
		return nil, fmt.Errorf("the holder never reached its pause point: %w", ctx.Err())
	}
}

// Resume lets the held operation go on; calling it again does nothing.
func (h *Held) Resume() { h.once.Do(func() { close(h.resume) }) }

// Wait resumes the held operation and returns its outcome, or an error if
// ctx ends first.
func (h *Held) Wait(ctx context.Context) (Result, error) {
	h.Resume()
	select {
	case <-h.done:
		return h.r, h.err
	case <-ctx.Done():
		return 0, fmt.Errorf("the held operation never ended: %w", ctx.Err())
	}
}
