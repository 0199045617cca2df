package hold

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/observetest"
	"github.com/sqlock/sqlock/observe"
)

// fake is a backend whose renewals answer from a script: a transient
// error, then confirmations.
type fake struct {
	mu       sync.Mutex
	answers  []error // nil: confirmed
	renewed  chan struct{}
	released int
}

func (f *fake) Renew(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	if len(f.answers) > 0 {
		err, f.answers = f.answers[0], f.answers[1:]
	}
	if err == nil {
		select {
		case f.renewed <- struct{}{}:
		default:
		}
	}
	return false, err
}

func (f *fake) Release(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
	return nil
}

func (f *fake) LostError(cause error) error { return cause }

// A renewal that fails transiently is tried again, reported as a Retry
// with cause "renew" and the attempt, and the next confirmation moves the
// deadline; Release reports the hold once and sends nothing the second
// time.
func TestTransientRenewalFailureIsRetriedAndReported(t *testing.T) {
	f := &fake{answers: []error{errors.New("connection reset")}, renewed: make(chan struct{}, 1)}
	var evs observetest.Recorder
	var h Hold
	sent := time.Now()
	ttl := time.Minute
	h.Start(context.Background(), f, Spec{TTL: ttl, Margin: ttl / 10, MarginName: "safety margin", RetryMin: time.Millisecond,
		RetryMax: time.Millisecond, Observer: &evs, Event: observe.Event{Source: "test", Name: "n"}}, sent, sent)
	first := h.Deadline()
	h.mu.Lock()
	h.beat.Reset(0) // renew now rather than in TTL/3
	h.mu.Unlock()
	<-f.renewed
	for !h.Deadline().After(first) { // the renewal's extend follows its answer
		time.Sleep(time.Millisecond)
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(context.Background()); err != ErrReleased || f.released != 1 {
		t.Fatalf("second Release: %v, %d sent", err, f.released)
	}
	got := evs.Events()
	if len(got) != 3 || got[0].Kind != observe.LockAcquire || got[0].Outcome != observe.Acquired ||
		got[1].Kind != observe.Retry || got[1].Cause != "renew" || got[1].Attempt != 1 ||
		got[1].Err == nil || got[1].Name != "n" ||
		got[2].Kind != observe.LockRelease || got[2].Outcome != observe.Released || got[2].Source != "test" {
		t.Fatalf("events: %+v", got)
	}
}
