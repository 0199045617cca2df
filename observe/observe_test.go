package observe

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(_ context.Context, e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func TestMultiFansOutAndDropsNil(t *testing.T) {
	a, b := &recorder{}, &recorder{}
	o := Multi(a, nil, b)
	o.Observe(context.Background(), Event{Kind: Stale, Table: "orders"})
	if len(a.events) != 1 || len(b.events) != 1 || b.events[0].Table != "orders" {
		t.Fatalf("got %v and %v", a.events, b.events)
	}
}

func TestNopAllocatesNothing(t *testing.T) {
	o := OrNop(nil)
	ctx := context.Background()
	e := Event{Kind: LockAcquire, Key: 42, Outcome: Acquired, Wait: time.Millisecond}
	if n := testing.AllocsPerRun(100, func() { o.Observe(ctx, e) }); n != 0 {
		t.Fatalf("Nop allocates %v per event", n)
	}
}

func TestSlogLevelsAndFields(t *testing.T) {
	var buf bytes.Buffer
	o := Slog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx := context.Background()
	o.Observe(ctx, Event{Kind: LockAcquire, Source: "advisory", Key: 7, Outcome: Acquired})
	if buf.Len() != 0 {
		t.Fatalf("a plain acquisition is Debug, got %q", buf.String())
	}
	o.Observe(ctx, Event{Kind: LockAcquire, Source: "advisory", System: "postgresql", Key: 7, Outcome: Timeout,
		Wait: 2 * time.Second, Err: errors.New("lock timeout")})
	o.Observe(ctx, Event{Kind: Retry, Source: "retry", Attempt: 2, Cause: "40001"})
	out := buf.String()
	if strings.Count(out, "system=") != 1 {
		t.Errorf("system logged other than once, for the event that has one:\n%s", out)
	}
	for _, want := range []string{"sqlock lock_acquire", "system=postgresql", "key=7", "outcome=timeout", "wait=2s",
		`error="lock timeout"`, "sqlock retry", "attempt=2", "cause=40001"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestStrings(t *testing.T) {
	if Lost.String() != "lost" || Kind(200).String() != "unknown" || Outcome(200).String() != "unknown" {
		t.Fatal("names")
	}
}

// Slog(nil) logs to slog.Default(), read at each event, instead of
// dereferencing nil on the first one.
func TestSlogNilLoggerUsesDefault(t *testing.T) {
	o := Slog(nil) // before the default is set: it is read per event
	old := slog.Default()
	t.Cleanup(func() { slog.SetDefault(old) })
	var buf bytes.Buffer
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	o.Observe(context.Background(), Event{Kind: Stale, Source: "versioned", Table: "orders"})
	if out := buf.String(); !strings.Contains(out, "sqlock stale") || !strings.Contains(out, "table=orders") {
		t.Fatalf("the default logger got %q", out)
	}
}

// TestMultiOfOneIsThatObserver: Multi drops nil and Nop and flattens nested
// Multis, so that every package's WithObserver can add with Multi at no
// cost: none is Nop, one is that observer, and each event reaches each
// observer once.
func TestMultiOfOneIsThatObserver(t *testing.T) {
	a, b, c := &recorder{}, &recorder{}, &recorder{}
	if _, ok := Multi().(Nop); !ok {
		t.Fatalf("Multi() = %T, want Nop", Multi())
	}
	if _, ok := Multi(nil, Nop{}).(Nop); !ok {
		t.Fatalf("Multi(nil, Nop{}) is not Nop")
	}
	if o := Multi(Nop{}, a, nil); o != Observer(a) {
		t.Fatalf("Multi(Nop{}, a, nil) = %v, want a itself", o)
	}
	o := Multi(Multi(Nop{}, a), Multi(b, c), nil)
	o.Observe(context.Background(), Event{Kind: Retry})
	for i, r := range []*recorder{a, b, c} {
		if len(r.events) != 1 {
			t.Fatalf("observer %d got %d events, want 1", i, len(r.events))
		}
	}
}
