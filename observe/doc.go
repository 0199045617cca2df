// Package observe is the one observer interface every sqlock package reports
// to: lock waits and holds, acquisitions by [Outcome], stale-version
// conflicts and retries, each as an [Event] of some [Kind].
//
// Start with [Slog] (events as log/slog records) or the OpenTelemetry metrics
// of package [github.com/sqlock/sqlock/observe/otelobserve], which lives
// apart so that users who do not want OpenTelemetry never compile it. The
// default everywhere is [Nop], which costs one indirect call per event and
// allocates nothing.
//
// An event says who reported it (Source), which store it is about (System,
// spelt as OpenTelemetry's db.system.name) and, for a lock, its Key or Name:
// exporters read these, never a package's name, so a new backend needs no
// edit in them.
//
// Observers are called synchronously on the caller's goroutine, sometimes
// while a lock is held: they must be fast, must not block and must be safe
// for concurrent use.
//
// # Options
//
// Three options have one meaning in every sqlock package:
//
//   - WithObserver(o) adds o: several WithObserver options add up, as
//     [Multi] does, and a nil o adds nothing.
//   - WithLogger(l), where a package has one, logs only what a caller cannot
//     see otherwise (a connection closed because its state was in doubt, a
//     lock lost, a server refused); events go to WithObserver([Slog](l)).
//   - A timeout or time limit is a positive duration: zero and negative are
//     refused with an error matching [github.com/sqlock/sqlock.ErrInvalidOption]
//     before anything is sent. Leave an option out for its default.
package observe
