package sqlock

import (
	"context"
	"errors"
)

// Election is one candidate in a leader election: a name that every
// candidate of the election shares, and this candidate's identity, a
// caller-chosen label (a host, a pid, a job id) that the others read as
// the leader's. lease's (*Candidate).Election and etcdlock's
// (*Candidate).Election adapt each backend to it:
//
//	var e sqlock.Election = lease.New(db).Candidate("billing-cron", host, 10*time.Second).Election()
//	var e sqlock.Election = etcdlock.New(client).Candidate("billing-cron", host, 10*time.Second).Election()
//
// The leader is the holder of the backend's lock on the name, and its term
// is that lock's fencing token: greater for every later leader, so the
// lock:"fence" columns of versioned, sqlxhelpers and gormplugin refuse the
// writes of a leader that was deposed without noticing (paused, cut off).
//
// Observe is a channel rather than a callback, as etcd's
// concurrency.Election's is: the caller ranges over it or selects on it
// beside its own work, at its own pace, and a slow reader never holds up
// the backend (it skips the leaders in between, not the latest).
//
// A bad name or identity (empty, over 255 bytes, not UTF-8 text without
// NUL bytes) is an error matching [ErrInvalidArgument] from every method,
// with nothing sent.
type Election interface {
	// Campaign waits until this candidate leads, as long as ctx allows
	// (unlike Acquire, no wait bound of the backend's own ends it: a
	// candidate campaigns until it wins or gives up), and returns its
	// leadership. A ctx that ends first is an error matching ErrTimeout
	// (its deadline) or its cause (a cancellation); the candidate has left
	// the race before Campaign returns.
	Campaign(ctx context.Context) (Leadership, error)
	// Leader returns the current leader's identity and term, or an error
	// matching ErrNoLeader if nobody leads (the last leader resigned or
	// its lock expired, and nobody has been elected since).
	Leader(ctx context.Context) (identity string, term int64, err error)
	// Observe returns a channel that receives the current leader at once
	// and then each change (a Leader with Term 0: nobody leads), until ctx
	// ends; then it is closed. A reader that falls behind skips states:
	// it receives the one pending when it left, then the latest.
	// Failures to read the leader are retried while ctx lasts; only bad
	// input is an error.
	Observe(ctx context.Context) (<-chan Leader, error)
}

// Leadership is a won election: a [Fenced] lock whose token is the term.
// Lost closes when the backend can no longer vouch for it — always before
// the backend lets another candidate win — and Context carries the term
// as the fencing token ([WithFencingToken]).
type Leadership interface {
	Fenced
	// Identity is the candidate's identity, as the other candidates'
	// Leader reads it.
	Identity() string
	// Resign gives the leadership up (the lock's Release), so that
	// another candidate can win at once instead of after the TTL.
	Resign(ctx context.Context) error
}

// Leader is an election's leader as [Election.Observe] reports it; the
// zero Leader is "nobody leads".
type Leader struct {
	Identity string
	Term     int64
}

// ErrNoLeader: an election has no leader now. Every backend's own
// sentinel for it matches this one through [errors.Is].
var ErrNoLeader = errors.New("sqlock: no leader")
