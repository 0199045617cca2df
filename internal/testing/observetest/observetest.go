// Package observetest records observe events for tests.
package observetest

import (
	"context"
	"slices"
	"sync"

	"github.com/sqlock/sqlock/observe"
)

// Recorder is an observe.Observer that keeps every event; safe for
// concurrent use. The zero value is ready.
type Recorder struct {
	mu     sync.Mutex
	events []observe.Event
}

// Observe records e.
func (r *Recorder) Observe(_ context.Context, e observe.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the events so far, in order.
func (r *Recorder) Events() []observe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Count counts the events of kind with outcome (observe.OutcomeNone: any).
func (r *Recorder) Count(kind observe.Kind, outcome observe.Outcome) int {
	n := 0
	for _, e := range r.Events() {
		if e.Kind == kind && (outcome == observe.OutcomeNone || e.Outcome == outcome) {
			n++
		}
	}
	return n
}

// Outcomes counts the events by outcome.
func (r *Recorder) Outcomes() map[observe.Outcome]int {
	m := map[observe.Outcome]int{}
	for _, e := range r.Events() {
		m[e.Outcome]++
	}
	return m
}

// Reset forgets every event.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
}
