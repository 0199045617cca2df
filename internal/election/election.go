// Package election is what every backend's leader election shares: the
// identity check, the campaign that outlasts the backend's wait bound, the
// observer's loop and the adapter to sqlock.Election. A backend supplies
// its lock (the leader holds it), how it records and reads the leader,
// and how it learns of a change.
package election

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/nilcheck"
)

// MaxIdentityBytes is the longest candidate identity, in bytes: a label
// for operators and other candidates, not a place for data.
const MaxIdentityBytes = 255

// CheckIdentity returns why identity is refused, or nil: it must be
// non-empty UTF-8 text without NUL bytes, at most MaxIdentityBytes long.
// The empty identity is refused so that a leader's identity tells it from
// "nobody has announced itself yet".
func CheckIdentity(identity string) error {
	switch {
	case identity == "":
		return errors.New("empty identity")
	case len(identity) > MaxIdentityBytes:
		return fmt.Errorf("identity is %d bytes, more than %d", len(identity), MaxIdentityBytes)
	case !utf8.ValidString(identity) || strings.IndexByte(identity, 0) >= 0:
		return errors.New("identity is not UTF-8 text without NUL bytes")
	}
	return nil
}

// Campaign calls acquire (the backend's Acquire of the election's lock)
// until it grants the lock or fails otherwise than by its own wait bound:
// a campaign lasts as long as ctx, whatever the backend's WithTimeout.
// A wait that ran out because ctx's deadline passed is returned as it is.
func Campaign[L any](ctx context.Context, acquire func(context.Context) (L, error)) (L, error) {
	for {
		l, err := acquire(ctx)
		if err == nil || !errors.Is(err, sqlock.ErrTimeout) || ctx.Err() != nil {
			return l, err
		}
	}
}

// Ended is the sentinel of a campaign whose announcement failed after
// its lock was granted: timeout (the backend's ErrTimeout) if ctx's
// deadline had passed, as it is for a wait that runs out, nil otherwise.
func Ended(ctx context.Context, timeout error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return timeout
	}
	return nil
}

// Observe returns the channel of an Observe: read gives the current leader
// (sqlock.ErrNoLeader, matched through errors.Is: nobody leads), next
// returns when it may have changed (or ctx's error once ctx ended). The
// first leader read is sent, then each change; a read that fails
// otherwise is tried again at the next. The channel is unbuffered: a
// reader that falls behind holds up nobody but its own observer, and
// receives the state pending when it left, then the latest, skipping
// those in between. It is closed when ctx ends.
func Observe(ctx context.Context, read func(context.Context) (sqlock.Leader, error), next func(context.Context) error) <-chan sqlock.Leader {
	ch := make(chan sqlock.Leader)
	go func() {
		defer close(ch)
		var last sqlock.Leader
		sent := false
		for {
			l, err := read(ctx)
			if errors.Is(err, sqlock.ErrNoLeader) {
				l, err = sqlock.Leader{}, nil
			}
			if err == nil && (!sent || l != last) {
				select {
				case ch <- l:
					last, sent = l, true
				case <-ctx.Done():
					return
				}
			}
			if ctx.Err() != nil || next(ctx) != nil {
				return
			}
		}
	}()
	return ch
}

// Backend is a backend's candidate, as [Adapt] sees it.
type Backend[L sqlock.Leadership] interface {
	Campaign(ctx context.Context) (L, error)
	Leader(ctx context.Context) (identity string, term int64, err error)
	Observe(ctx context.Context) (<-chan sqlock.Leader, error)
}

// Adapt is b as a sqlock.Election. A failed campaign's typed nil
// leadership never becomes a non-nil sqlock.Leadership.
func Adapt[L sqlock.Leadership](b Backend[L]) sqlock.Election { return adapter[L]{b} }

type adapter[L sqlock.Leadership] struct{ b Backend[L] }

func (a adapter[L]) Campaign(ctx context.Context) (sqlock.Leadership, error) {
	l, err := a.b.Campaign(ctx)
	if err != nil || nilcheck.Is(l) {
		return nil, err
	}
	return l, nil
}

func (a adapter[L]) Leader(ctx context.Context) (string, int64, error) { return a.b.Leader(ctx) }

func (a adapter[L]) Observe(ctx context.Context) (<-chan sqlock.Leader, error) {
	return a.b.Observe(ctx)
}
