package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// replicas is WithReplicas: how many replicas must acknowledge a grant or
// a renewal, and for how long the server waits for them.
type replicas struct {
	n     int
	bound time.Duration
}

// WithReplicas makes a Locker's grants and renewals wait until n replicas
// of its server acknowledged them, for at most bound: each acquiring or
// renewing script is sent with WAIT n bound behind it in one pipeline (one
// round trip), so the key and its fencing counter's increment are on n
// replicas before the lock is handed out. A grant they do not acknowledge
// in time is released (owner-checked) and refused with [ErrNotReplicated]
// (TryAcquire returns it; Acquire tries again until its wait runs out); a
// renewal they do not acknowledge does not count, and is tried again while
// the lock is trusted — the lock is trusted only as long as what the
// replicas have. Release does not wait: a release a replica missed keeps
// the key there until its TTL, which locks others out but lets no one in.
//
// It protects against one failure: the primary lost and a replica that
// acknowledged promoted in its place. It is not consensus — see
// docs/redislock.md. n must be at least 1 and bound positive and, for a
// client with a read timeout, shorter than it (or the reply would time out
// on the client first): otherwise an error matching
// [sqlock.ErrInvalidOption]. It needs a client of one primary (a
// *redis.Client, which [redis.NewFailoverClient] also returns): a cluster
// or ring client, whose pipelines spread over several servers, is refused
// with an error matching [sqlock.ErrUnsupported]; so is a [Redlock], whose
// servers are independent masters.
func WithReplicas(n int, bound time.Duration) Option {
	return func(c *config) error {
		if n < 1 || bound <= 0 {
			return errkind.New(sqlock.ErrInvalidOption,
				"redislock: WithReplicas(%d, %v): need at least 1 replica and a positive bound", n, bound)
		}
		c.replicas = replicas{n: n, bound: bound.Truncate(time.Millisecond)}
		if c.replicas.bound == 0 {
			c.replicas.bound = time.Millisecond // WAIT 0 would wait for ever
		}
		return nil
	}
}

// checkReplicas is New's check of WithReplicas against its client.
func (r replicas) check(c redis.UniversalClient) error {
	if r.n == 0 {
		return nil
	}
	one, ok := c.(*redis.Client)
	if !ok {
		return errkind.New(sqlock.ErrUnsupported,
			"redislock: WithReplicas needs a client of one primary (*redis.Client), not %T", c)
	}
	if rt := one.Options().ReadTimeout; rt > 0 && r.bound >= rt {
		return errkind.New(sqlock.ErrInvalidOption,
			"redislock: WithReplicas bound %v is not shorter than the client's read timeout %v", r.bound, rt)
	}
	return nil
}

// run sends script with keys and args and, with replicas to wait for, WAIT
// behind it in the same pipeline: one round trip once the script is loaded
// (a first EVALSHA refused with NOSCRIPT is sent again as EVAL). WAIT
// covers every write this connection made, so the script's. acked is how
// many replicas acknowledged (0 without replicas).
func (r replicas) run(ctx context.Context, c redis.UniversalClient, s *redis.Script, keys []string, args ...any) (res *redis.Cmd, acked int, err error) {
	if r.n == 0 {
		res = s.Run(ctx, c, keys, args...)
		return res, 0, res.Err()
	}
	for _, eval := range [2]bool{false, true} {
		pipe := c.Pipeline()
		if eval {
			res = s.Eval(ctx, pipe, keys, args...)
		} else {
			res = s.EvalSha(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "wait", r.n, r.bound.Milliseconds())
		pipe.Exec(ctx) // each command keeps its own error
		if !eval && redis.HasErrorPrefix(res.Err(), "NOSCRIPT") {
			continue
		}
		if err := res.Err(); err != nil {
			return res, 0, err
		}
		n, err := wait.Int64()
		if err != nil {
			return res, 0, fmt.Errorf("WAIT: %w", err)
		}
		return res, int(n), nil
	}
	panic("unreachable")
}

// short says how a grant or renewal fell short: acked of r.n replicas.
func (r replicas) short(acked int) error {
	return fmt.Errorf("%d of %d replicas acknowledged within %v", acked, r.n, r.bound)
}

// refuse is a grant fewer than r.n replicas acknowledged, already given
// back: refused, matching ErrNotReplicated.
func (r replicas) refuse(acked int) ttllock.Grant {
	return ttllock.Grant{Remaining: -1, Refused: ttllock.Refuse(ErrNotReplicated, r.short(acked))}
}

// renewal is the error of a renewal fewer than r.n replicas acknowledged:
// transient (tried again while the lock is trusted), matching
// ErrNotReplicated.
func (r replicas) renewal(acked int) error {
	return fmt.Errorf("%w: %w", ErrNotReplicated, r.short(acked))
}
