package lease

import "time"

// OnPause makes m call f whenever a waiter begins a pause between tries
// (after a failed try, listening if it listens): tests use it to know that
// a waiter waits.
func OnPause(m *Manager, f func()) {
	if f == nil {
		m.onPause = nil
		return
	}
	m.onPause = func(bool) { f() }
}

// SetSafetyPoll sets how long m's listening waiters wait for a
// notification before they try again anyway (default a second): tests that
// make it longer than any wait know that a waiter woke for the notification.
func SetSafetyPoll(m *Manager, d time.Duration) { m.safety = d }

// OnWake makes m call f whenever a waiter's pause ends before its context:
// notified is true if a notification ended it, false if its timer did.
func OnWake(m *Manager, f func(notified bool)) { m.onWake = f }

// OnPauseMode is OnPause with the pause's mode: listening for a
// notification (true), or polling.
func OnPauseMode(m *Manager, f func(listening bool)) { m.onPause = f }

// Statements are m's acquire and release statements, for the benchmark
// that runs them by hand.
func Statements(m *Manager) (acquire, release string) { return m.stmt.acquire, m.stmt.release }

// GuardStatement is m's guard statement and the owner l checks it with, for
// the benchmark that runs it by hand with and without its row lock.
func GuardStatement(m *Manager, l *Lease) (guard, owner string) { return m.stmt.guard, l.a.owner }

// Ticket is the queue ticket l waited with before it was granted; 0 if it
// was granted without waiting.
func Ticket(l *Lease) int64 { return l.a.ticket }
