package txlock

import (
	"context"
	"database/sql"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/lockedtx"
)

// Querier is the handle DoOptimistic's fn runs its statements on: the
// *sql.DB (or *sql.Conn) itself on the lock-free first attempt, the locked
// *sql.Tx on every attempt after a conflict. versioned's writes take it as
// their versioned.DB.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// HotKeys is what the DoOptimistic calls sharing it know of each key: how
// many of their locked attempts wait for the key's lock or hold it, and how
// many lock-free first attempts run on it. Make one per handle (a field beside the *sql.DB) and pass it to
// every DoOptimistic call on that handle with [WithHotKeys]. The zero value
// is ready; it is 2 KiB, however many keys, and is safe for concurrent use.
// It must not be copied after first use.
type HotKeys struct{ h lockedtx.HotKeys }

// WithHotKeys makes DoOptimistic count its attempts in h and, while one of
// the attempts sharing h waits for the key's lock or holds it, or four
// lock-free first attempts run on the key at once, start a new call with a
// locked attempt instead of a lock-free one. Lock-free first attempts that
// barge past a queue win at the cost of the holder they overtook, which
// then reads a stale row and queues again; a crowd of them all read the
// same version, and all but one conflict: the tails this option removes. A
// nil h, or WithHotKeys on any call but DoOptimistic, is refused with an
// error matching sqlock.ErrInvalidOption.
func WithHotKeys(h *HotKeys) Option {
	return func(c *lockedtx.Config) {
		if h == nil {
			c.Fail(errkind.New(sqlock.ErrInvalidOption, "txlock: WithHotKeys: nil *HotKeys"))
			return
		}
		c.Hot = &h.h
	}
}

// DoOptimistic is optimistic locking that queues when a key turns hot. fn's
// first attempt runs on db with no transaction and no lock, as under
// retry.Do; after a conflict — a stale versioned write, 40001 or 40P01 —
// every further attempt runs fn in a transaction holding key's advisory
// lock (the transaction Do would run, the lock travelling with BEGIN on
// OpenDB), so that under contention the retries wait their turn in
// PostgreSQL's lock queue instead of colliding again. There is no backoff
// between attempts: the queue is the wait ([WithRetry] can set one). With
// [WithHotKeys], while an attempt on key of the calls sharing the
// [HotKeys] waits for its lock or holds it, or four lock-free first
// attempts on key run at once, a new call's first attempt is a locked one
// too, rather than barging past it or joining the crowd (see
// docs/txlock.md).
//
// fn must re-read what it depends on, on q, at every attempt, and guard its
// writes (a versioned write); the lock is held for one attempt's
// transaction only, and keeps apart only the writers that take it. On the
// first attempt q is db, so statements fn runs there commit one by one.
// Attempts are counted as in Do (5 in all by default); the options are
// Do's, except that WithoutRetry, Shared and TryOnce are refused with an
// error matching sqlock.ErrInvalidOption, and bad input is refused as Do
// refuses it, before fn runs.
func DoOptimistic[H interface {
	DB
	Querier
}](ctx context.Context, db H, key advisory.Key, fn func(ctx context.Context, q Querier) error, opts ...Option) error {
	if err := refuseSQLCall(db, fn == nil); err != nil {
		return err
	}
	unlocked := func(c *lockedtx.Config) { c.Unlocked = func(ctx context.Context) error { return fn(ctx, db) } }
	begin := lockedtx.SQLBegin(db)
	return lockedtx.Run(ctx, db, key, func(ctx context.Context, a *lockedtx.Attempt) (Querier, lockedtx.Tx, bool, error) {
		tx, t, folded, err := begin(ctx, a)
		if err != nil {
			return nil, nil, false, err
		}
		return tx, t, folded, nil
	}, fn, append(opts[:len(opts):len(opts)], unlocked))
}
