package election_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/election"
	"github.com/sqlock/sqlock/internal/errkind"
)

func TestCheckIdentity(t *testing.T) {
	for _, id := range []string{"h", "host-1/pid-42", strings.Repeat("é", election.MaxIdentityBytes/2)} {
		if err := election.CheckIdentity(id); err != nil {
			t.Errorf("CheckIdentity(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", strings.Repeat("i", election.MaxIdentityBytes+1), "\xff", "a\x00b"} {
		if err := election.CheckIdentity(id); err == nil {
			t.Errorf("CheckIdentity(%q) = nil, want a refusal", id)
		}
	}
}

var errTimeout = errkind.New(sqlock.ErrTimeout, "fake: timed out")

// TestCampaignOutlastsTheWaitBound: a wait that ran out at the backend's
// own bound is tried again while ctx lasts; the end of ctx and any other
// error end the campaign at once.
func TestCampaignOutlastsTheWaitBound(t *testing.T) {
	calls := 0
	got, err := election.Campaign(context.Background(), func(context.Context) (int, error) {
		if calls++; calls < 4 {
			return 0, errTimeout
		}
		return 7, nil
	})
	if got != 7 || err != nil || calls != 4 {
		t.Fatalf("Campaign = %d, %v after %d calls; want 7 after 4", got, err, calls)
	}
	other := errors.New("refused")
	calls = 0
	if _, err := election.Campaign(context.Background(), func(context.Context) (int, error) { calls++; return 0, other }); err != other || calls != 1 {
		t.Fatalf("Campaign = %v after %d calls; want the error after 1", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	_, err = election.Campaign(ctx, func(context.Context) (int, error) {
		calls++
		cancel()
		return 0, errTimeout
	})
	if !errors.Is(err, sqlock.ErrTimeout) || calls != 1 {
		t.Fatalf("Campaign after ctx ended = %v after %d calls; want the timeout after 1", err, calls)
	}
}

// fakeLeader is a leader a test changes; next returns on each change or
// after a poll of a (fake) second.
type fakeLeader struct {
	mu     sync.Mutex
	l      sqlock.Leader
	fail   bool
	reads  int
	change chan struct{}
}

func (f *fakeLeader) set(l sqlock.Leader, fail bool) {
	f.mu.Lock()
	f.l, f.fail = l, fail
	f.mu.Unlock()
	select {
	case f.change <- struct{}{}:
	default:
	}
}

func (f *fakeLeader) read(context.Context) (sqlock.Leader, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	switch {
	case f.fail:
		return sqlock.Leader{}, errors.New("unreachable")
	case f.l.Term == 0:
		return sqlock.Leader{}, fmt.Errorf("fake: %w", sqlock.ErrNoLeader)
	}
	return f.l, nil
}

func (f *fakeLeader) next(ctx context.Context) error {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-f.change:
	case <-t.C:
	case <-ctx.Done():
	}
	return ctx.Err()
}

// TestObserve: the first state is sent (nobody: the zero Leader), then
// each change once, however many reads see it; failed reads are retried
// and send nothing; a reader that falls behind gets the state pending
// when it left, then the latest, skipping those in between; the channel
// closes when ctx ends.
func TestObserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeLeader{change: make(chan struct{}, 1)}
		ctx, cancel := context.WithCancel(t.Context())
		ch := election.Observe(ctx, f.read, f.next)
		if l := <-ch; l != (sqlock.Leader{}) {
			t.Fatalf("first state %+v, want nobody", l)
		}
		a := sqlock.Leader{Identity: "a", Term: 3}
		f.set(a, false)
		if l := <-ch; l != a {
			t.Fatalf("got %+v, want %+v", l, a)
		}
		// Unchanged for many polls, then unreachable for a while: nothing
		// is sent.
		time.Sleep(5 * time.Second)
		f.set(a, true)
		f.mu.Lock()
		before := f.reads
		f.mu.Unlock()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		select {
		case l := <-ch:
			t.Fatalf("sent %+v without a change", l)
		default:
		}
		f.mu.Lock()
		retried := f.reads - before
		f.mu.Unlock()
		if retried < 5 {
			t.Fatalf("%d reads in 5 polls of a failing leader, want a read at each", retried)
		}
		f.set(a, false)
		// Three changes while the reader is away: it gets the state that
		// was pending when it left, then the latest, and not the one in
		// between.
		b := sqlock.Leader{Identity: "b", Term: 4}
		f.set(b, false)
		synctest.Wait() // b read, its send pending
		f.set(sqlock.Leader{Identity: "c", Term: 5}, false)
		d := sqlock.Leader{Identity: "d", Term: 6}
		f.set(d, false)
		time.Sleep(2 * time.Second)
		if l := <-ch; l != b {
			t.Fatalf("got %+v, want the pending %+v", l, b)
		}
		if l := <-ch; l != d {
			t.Fatalf("got %+v, want the latest %+v", l, d)
		}
		cancel()
		for range ch {
		}
	})
}

type fakeLead struct{ sqlock.Leadership }

type fakeCandidate struct{ fail bool }

func (c fakeCandidate) Campaign(context.Context) (*fakeLead, error) {
	if c.fail {
		return nil, errors.New("no")
	}
	return &fakeLead{}, nil
}
func (fakeCandidate) Leader(context.Context) (string, int64, error) { return "x", 1, nil }
func (fakeCandidate) Observe(context.Context) (<-chan sqlock.Leader, error) {
	return nil, nil
}

// TestAdaptNeverReturnsATypedNil: a failed campaign's nil leadership is a
// nil sqlock.Leadership.
func TestAdaptNeverReturnsATypedNil(t *testing.T) {
	l, err := election.Adapt[*fakeLead](fakeCandidate{fail: true}).Campaign(context.Background())
	if l != nil || err == nil {
		t.Fatalf("failed Campaign = %#v, %v; want a nil Leadership and the error", l, err)
	}
	if l, err := election.Adapt[*fakeLead](fakeCandidate{}).Campaign(context.Background()); l == nil || err != nil {
		t.Fatalf("Campaign = %v, %v", l, err)
	}
}

// TestEnded: an announcement that failed because the campaign's deadline
// passed is a timeout, as a wait that ran out is; a cancellation or
// another failure is not.
func TestEnded(t *testing.T) {
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if got := election.Ended(past, errTimeout); got != errTimeout {
		t.Fatalf("Ended after the deadline = %v, want the timeout", got)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if got := election.Ended(cancelled, errTimeout); got != nil {
		t.Fatalf("Ended after a cancellation = %v, want nil", got)
	}
	if got := election.Ended(context.Background(), errTimeout); got != nil {
		t.Fatalf("Ended of a live context = %v, want nil", got)
	}
}
