// Package retry runs an operation again when it fails in a way that is safe
// to retry: stale versions, serialization failures (40001), deadlocks
// (40P01), and lock timeouts (55P03) when asked; never a cancelled context
// and never a COMMIT whose outcome is unknown. It provides backoff policies,
// attempt and time limits, and decorators for repository methods.
package retry
