// Package demo reproduces the races sqlock exists for — a payment charged
// twice, the last seat sold twice, stock driven negative, a task processed
// twice — with several OS processes as replicas against one PostgreSQL, and
// shows each mechanism stopping them. The payment and stock scenarios also
// run them the way a service does: GORM with the plugin registered and sqlx
// with sqlxhelpers, on one struct per table tagged lock:"version", each
// repository method wrapped with retry.Wrap (repo.go).
//
// The coordinator (Run) prepares the schema for one scenario and strategy,
// starts the replicas (this same binary, re-executed with -worker), releases
// them together, collects what they report, and then asks the database what
// actually happened: the anomalies in the tables come from the database, not
// from the workers' own accounting. The naive strategies open a real race
// window (a simulated provider call or think time between the check and the
// write), so their anomalies are real races between processes.
//
// The client-retry scenario (clientretry.go) runs the payment as an HTTP
// API on every replica: each client's first response is lost and it
// retries with the same Idempotency-Key on another replica; behind
// idem.Middleware each order is charged once, and the demo fails if not.
//
// The paused-holder scenario (paused.go) is driven step by step instead:
// one replica is frozen with SIGSTOP while it holds the lock, past the
// lease's TTL, and resumed after the other has written, so each strategy
// shows the same outcome on every run.
package demo
