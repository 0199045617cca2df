package observe

import (
	"context"
	"log/slog"
	"time"
)

// Observer receives events. See the package documentation for the rules an
// implementation must follow.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// Kind says what happened.
type Kind uint8

const (
	// LockAcquire: an attempt to take a lock ended (Outcome, Wait).
	LockAcquire Kind = iota + 1
	// LockRelease: a held lock ended (Outcome Released or Lost, Hold).
	LockRelease
	// Stale: a versioned write matched no row at the expected version.
	Stale
	// Retry: an operation failed retryably and will run again after Wait
	// (Attempt is the attempt that failed, Cause the reason).
	Retry
)

var kindNames = [...]string{"unknown", "lock_acquire", "lock_release", "stale", "retry"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return kindNames[0]
}

// Outcome is how a lock acquisition or hold ended.
type Outcome uint8

const (
	OutcomeNone Outcome = iota
	Acquired            // the lock was granted
	Busy                // a try-once found it held elsewhere
	Timeout             // the wait ran out (lock_timeout, 55P03)
	Deadlock            // the server chose this waiter as a deadlock victim (40P01)
	Canceled            // the caller's context ended the wait
	Failed              // any other error
	Released            // a held lock was released normally
	Lost                // a held lock's connection died
)

var outcomeNames = [...]string{"none", "acquired", "busy", "timeout", "deadlock", "canceled", "failed", "released", "lost"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Event is one observation. Fields that do not apply to a Kind are zero.
type Event struct {
	Kind   Kind
	Source string // the reporting package: "advisory", "txlock", "versioned", "retry", …
	// System is the store the event is about, spelt as OpenTelemetry's
	// db.system.name spells it ("postgresql", "mariadb", "mysql", "redis",
	// "etcd", "aws.dynamodb"), or "" where the reporter cannot know it (retry
	// wraps any function). Exporters read it instead of guessing from Source.
	System  string
	Key     int64  // a numbered lock's key (advisory, txlock); 0 for a lock known by Name alone
	Name    string // the text Key was made from (advisory.KeyOf), or a named lock's name (lease, redislock)
	Shared  bool   // a shared (read) lock
	Outcome Outcome
	Wait    time.Duration // time spent waiting for a lock, or the backoff before a retry
	Hold    time.Duration // time a lock was held
	Attempt int           // 1-based attempt number, for retries
	Cause   string        // why a retry happens: "stale", "40001", "40P01", "55P03", …
	Table   string        // the table of a stale write
	Err     error
}

// Nop ignores every event.
type Nop struct{}

// Observe does nothing.
func (Nop) Observe(context.Context, Event) {}

// OrNop returns o, or Nop when o is nil, so callers never check for nil.
func OrNop(o Observer) Observer {
	if o == nil {
		return Nop{}
	}
	return o
}

type multi []Observer

func (m multi) Observe(ctx context.Context, e Event) {
	for _, o := range m {
		o.Observe(ctx, e)
	}
}

// Multi returns an Observer that passes each event to every one of obs in
// order. Nil and Nop entries are dropped and nested Multis are flattened, so
// that Multi of one observer is that observer and Multi of none is Nop:
// every package's WithObserver adds its observer with Multi at no cost.
func Multi(obs ...Observer) Observer {
	m := make(multi, 0, len(obs))
	for _, o := range obs {
		switch o := o.(type) {
		case nil, Nop:
		case multi:
			m = append(m, o...)
		default:
			m = append(m, o)
		}
	}
	switch len(m) {
	case 0:
		return Nop{}
	case 1:
		return m[0]
	}
	return m
}

// Slog returns an Observer that logs each event: stale conflicts, retries
// and lock outcomes other than acquired/released at Info, the rest at Debug.
// A nil l logs to slog.Default(), read at each event, so a later
// slog.SetDefault applies.
func Slog(l *slog.Logger) Observer { return slogObserver{l} }

type slogObserver struct{ l *slog.Logger }

func (s slogObserver) Observe(ctx context.Context, e Event) {
	l := s.l
	if l == nil {
		l = slog.Default()
	}
	level := slog.LevelDebug
	switch {
	case e.Kind == Stale || e.Kind == Retry:
		level = slog.LevelInfo
	case e.Outcome != Acquired && e.Outcome != Released && e.Outcome != OutcomeNone:
		level = slog.LevelInfo
	}
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("source", e.Source)}
	if e.System != "" {
		attrs = append(attrs, slog.String("system", e.System))
	}
	if e.Kind == LockAcquire || e.Kind == LockRelease {
		attrs = append(attrs, slog.Int64("key", e.Key), slog.Bool("shared", e.Shared),
			slog.String("outcome", e.Outcome.String()))
		if e.Name != "" {
			attrs = append(attrs, slog.String("name", e.Name))
		}
	}
	if e.Wait != 0 {
		attrs = append(attrs, slog.Duration("wait", e.Wait))
	}
	if e.Hold != 0 {
		attrs = append(attrs, slog.Duration("hold", e.Hold))
	}
	if e.Attempt != 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	if e.Cause != "" {
		attrs = append(attrs, slog.String("cause", e.Cause))
	}
	if e.Table != "" {
		attrs = append(attrs, slog.String("table", e.Table))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	l.LogAttrs(ctx, level, "sqlock "+e.Kind.String(), attrs...)
}
