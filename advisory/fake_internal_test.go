package advisory

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"time"
)

// fakeBackend is an in-memory pool for timer-driven logic under
// testing/synctest: no network, so every wait in it is durably blocking
// and the bubble's clock is exact. It hands out at most max sessions at
// once (a conn waits, as a pool does, until one comes back or ctx ends),
// each taking dial to open. Sessions grant every lock they are asked for
// (the tests use distinct keys) and answer pings with their own pid until
// they are killed or muted.
type fakeBackend struct {
	max  int
	dial time.Duration

	onExec func(query string) // if set, sees every exec's text

	mu      sync.Mutex
	out     int
	opened  int // sessions ever handed out
	freed   chan struct{}
	nextPID int32
	pings   map[int32][]time.Time // when each session answered a ping
}

func newFakeBackend(max int, dial time.Duration) *fakeBackend {
	return &fakeBackend{max: max, dial: dial, freed: make(chan struct{}), pings: map[int32][]time.Time{}}
}

func (b *fakeBackend) conn(ctx context.Context) (session, error) {
	for {
		b.mu.Lock()
		if b.out < b.max {
			b.out++
			b.opened++
			b.nextPID++
			s := &fakeSession{b: b, pid: b.nextPID}
			b.mu.Unlock()
			select {
			case <-time.After(b.dial):
			case <-ctx.Done():
				b.put()
				return nil, ctx.Err()
			}
			return s, nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// put takes a session back.
func (b *fakeBackend) put() {
	b.mu.Lock()
	b.out--
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

func (b *fakeBackend) maxConns() int { return b.max }
func (b *fakeBackend) connsInUse() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out
}
func (b *fakeBackend) handle() any { return b }

func (b *fakeBackend) openedConns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opened
}

func (b *fakeBackend) pingsOf(pid int32) []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.pings[pid]...)
}

// errFakeReset is a killed session's answer.
var errFakeReset = errors.New("fake: connection reset by peer")

type fakeSession struct {
	b   *fakeBackend
	pid int32

	mu     sync.Mutex
	killed bool // every statement fails at once
	muted  bool // no statement is answered: each waits for its deadline
	done   bool
}

func (s *fakeSession) kill() { s.mu.Lock(); s.killed = true; s.mu.Unlock() }
func (s *fakeSession) mute() { s.mu.Lock(); s.muted = true; s.mu.Unlock() }

// answer is what a statement sent at the time of the call meets.
func (s *fakeSession) answer(deadline time.Time) error {
	s.mu.Lock()
	killed, muted := s.killed, s.muted
	s.mu.Unlock()
	switch {
	case killed:
		return errFakeReset
	case muted:
		time.Sleep(time.Until(deadline))
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (s *fakeSession) queryRow(_ context.Context, deadline time.Time, query string, _ []any, dest ...any) error {
	if err := s.answer(deadline); err != nil {
		return err
	}
	switch {
	case query == pingSQL:
		*dest[0].(*int32) = s.pid
		s.b.mu.Lock()
		s.b.pings[s.pid] = append(s.b.pings[s.pid], time.Now())
		s.b.mu.Unlock()
	case strings.Contains(query, "advisory"):
		*dest[0].(*bool) = true
	}
	return nil
}

func (s *fakeSession) exec(_ context.Context, deadline time.Time, query string) error {
	if s.b.onExec != nil {
		s.b.onExec(query)
	}
	return s.answer(deadline)
}

func (s *fakeSession) wait(ctx context.Context, deadline time.Time, _ time.Duration, query string) (bool, error) {
	return false, s.exec(ctx, deadline, query)
}

func (s *fakeSession) end() {
	s.mu.Lock()
	done := s.done
	s.done = true
	s.mu.Unlock()
	if !done {
		s.b.put()
	}
}

func (s *fakeSession) release() { s.end() }
func (s *fakeSession) destroy() { s.end() }

// fakeLocker is a Locker on b, its probe taken as passed.
func fakeLocker(b *fakeBackend, opts ...Option) *Locker {
	l := newLocker(b, opts)
	if l.err != nil {
		panic(l.err)
	}
	l.verified.Store(true)
	return l
}

// sessionOf is the fake session a lock is held on, shared or its own.
func sessionOf(lk *Lock) *fakeSession {
	if lk.mc != nil {
		return lk.mc.sess.(*fakeSession)
	}
	return lk.sess.(*fakeSession)
}
