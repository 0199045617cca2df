package matrix

import (
	"context"
	"database/sql"
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

// Gate holds one operation between its read and its write: Held is closed
// when the operation reaches its write, which then waits until Open is
// closed (or its context ends).
type Gate struct {
	Querier
	Held, Open chan struct{}
}

// NewGate is a Gate on q.
func NewGate(q Querier) *Gate {
	g := &Gate{Held: make(chan struct{}), Open: make(chan struct{})}
	g.Querier = PauseBeforeWrite(q, func(ctx context.Context) {
		close(g.Held)
		select {
		case <-g.Open:
		case <-ctx.Done():
		}
	})
	return g
}
