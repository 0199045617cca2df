// Package observe is the one observer interface every sqlock package reports
// to: lock waits and holds, acquisitions by outcome, stale-version conflicts
// and retries.
//
// A package takes an Observer through its options (for example
// advisory.WithObserver). The default is Nop, which costs one indirect call
// per event and allocates nothing. Slog turns events into log/slog records;
// an OpenTelemetry metrics adapter lives in its own package so that users who
// do not want OpenTelemetry never compile it. Multi fans out to several.
//
// Observers are called synchronously on the caller's goroutine, sometimes
// while a lock is held: they must be fast, must not block and must be safe
// for concurrent use.
package observe
