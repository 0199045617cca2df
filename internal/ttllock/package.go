package ttllock

import (
	"errors"
	"strings"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/observe"
)

// The toolkit of a TTL-lock package. A backend (lease, redislock, and the
// next ones) describes itself once in a [Package], keeps its options'
// shared part in a [Config], embeds a [Base] in its Manager or Locker and a
// [Lock] in its lock type, and supplies a [Store]: one owner-checked
// request each to grant, renew and release. [Acquire] then does the rest,
// the same way for every backend: the input check, the wait's bound, the
// attempts and the pauses between them, the errors, the observer's events
// (and its panic), the renewals and the trust window.

// Package is what the toolkit needs to know about a TTL-lock package: one
// value per package, made at its init — or, for a package whose errors also
// say where the lock lives (dynamo's name the Locker's table), one copy per
// Manager or Locker made by [Package.WithError].
type Package struct {
	// Name begins every error's text ("lease: …") and is the events'
	// Source; System is the events' System ("postgresql", "redis": see
	// observe.Event); Noun is what the package calls what it holds
	// ("lease", "lock"), in the errors' text.
	Name, System, Noun string

	// The package's sentinels, which its errors match: see [Sentinels].
	Sentinels

	// Error is the package's error type, made from the operation ("acquire",
	// "tryacquire", "hold", "release"), the lock's name ("" if none), the
	// sentinel it matches (nil: none) and the cause (nil: none).
	Error func(op, name string, kind, cause error) error

	// Margin is the trust window's margin for a TTL: a lock granted or
	// renewed by a request sent at t is trusted until t + TTL − Margin.
	// MarginName names it in the errors ("safety margin").
	Margin     func(ttl time.Duration) time.Duration
	MarginName string

	// A transient renewal failure is tried again after a pause that
	// doubles from RetryMin to RetryMax, while the lock is trusted.
	RetryMin, RetryMax time.Duration

	// DefaultTimeout bounds Acquire's wait unless WithTimeout says
	// otherwise.
	DefaultTimeout time.Duration

	// BoundTry: a try-once is bounded by the package's timeout too, as
	// Acquire is (a lease's try may wait for a guarded transaction's row
	// lock). Otherwise a try-once has no timer of its own.
	BoundTry bool
}

// Sentinels are the conditions every TTL-lock package reports. NotAcquired,
// Timeout and Lost match sqlock's of the same name, and Invalid matches
// sqlock.ErrInvalidArgument ([NewSentinels] makes them so).
type Sentinels struct {
	NotAcquired error // a try-once found the lock held by someone else
	Timeout     error // a wait ran out (WithTimeout, or the caller's deadline)
	Lost        error // the lock can no longer be trusted
	NotHeld     error // a Release of a lock already released, or no longer this holder's
	Invalid     error // bad name or TTL, refused before anything was sent
}

// NewSentinels returns the sentinels of the package called pkg, whose locks
// it calls noun and names by their what ("name", "key"):
// "lease: held by someone else", "lease: timed out waiting for the lease",
// "lease: lost", "lease: not held", "lease: invalid name or TTL".
func NewSentinels(pkg, noun, what string) Sentinels {
	return Sentinels{
		NotAcquired: errkind.New(sqlock.ErrNotAcquired, "%s: held by someone else", pkg),
		Timeout:     errkind.New(sqlock.ErrTimeout, "%s: timed out waiting for the %s", pkg, noun),
		Lost:        errkind.New(sqlock.ErrLost, "%s: lost", pkg),
		NotHeld:     errors.New(pkg + ": not held"),
		Invalid:     errkind.New(sqlock.ErrInvalidArgument, "%s: invalid %s or TTL", pkg, what),
	}
}

// ErrorText is the text of a package's error: "<pkg>: <op> "<name>":
// <sentinel's text without its prefix>: <cause>", each part only if given.
func ErrorText(pkg, op, name string, kind, cause error) string {
	var b strings.Builder
	b.WriteString(pkg)
	b.WriteString(": ")
	b.WriteString(op)
	if name != "" {
		b.WriteString(" ")
		b.WriteString(quote(name))
	}
	if kind != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(kind.Error(), pkg+": "))
	}
	if cause != nil {
		b.WriteString(": ")
		b.WriteString(cause.Error())
	}
	return b.String()
}

// quote shows a name in an error, cut to a readable length.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "…"
	}
	return `"` + s + `"`
}

// Unwrap is what a package's error unwraps to: its sentinel and its cause,
// so that errors.Is and errors.As see both.
func Unwrap(kind, cause error) []error {
	errs := make([]error, 0, 2)
	if kind != nil {
		errs = append(errs, kind)
	}
	if cause != nil {
		errs = append(errs, cause)
	}
	return errs
}

// Config is the part of a package's options that every TTL-lock package
// has, with the same meaning: the package embeds it in its own config and
// its options set it through the methods below.
type Config struct {
	p        *Package
	Timeout  time.Duration    // bounds Acquire's wait
	MaxHold  time.Duration    // > 0: Lost fires this long after the acquisition, renewed or not
	Observer observe.Observer // nil: none
}

// NewConfig returns p's default Config.
func (p *Package) NewConfig() Config { return Config{p: p, Timeout: p.DefaultTimeout} }

// SetTimeout is WithTimeout: d must be positive (zero or negative: an error
// matching sqlock.ErrInvalidOption); no wait is unbounded.
func (c *Config) SetTimeout(d time.Duration) error {
	if d <= 0 {
		return errkind.New(sqlock.ErrInvalidOption, "%s: timeout %v must be positive", c.p.Name, d)
	}
	c.Timeout = d
	return nil
}

// SetMaxHold is WithMaxHold: d must be positive.
func (c *Config) SetMaxHold(d time.Duration) error {
	if d <= 0 {
		return errkind.New(sqlock.ErrInvalidOption, "%s: maximum hold %v must be positive", c.p.Name, d)
	}
	c.MaxHold = d
	return nil
}

// AddObserver is WithObserver: several add up (observe.Multi); nil adds
// nothing.
func (c *Config) AddObserver(o observe.Observer) { c.Observer = observe.Multi(c.Observer, o) }

// Apply applies opts to c in order, skipping nil ones, and returns the
// first option's error.
func Apply[C any, O ~func(*C) error](c *C, opts []O) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// WithError returns a copy of p whose errors are made by errf, for a
// Manager's or Locker's [Base.Init]: errf adds what that Manager or Locker
// knows and the package's Error cannot (dynamo: the table), for every error
// the toolkit makes for it — its acquisitions', its locks' renewals and
// releases'. Everything else is p's.
func (p *Package) WithError(errf func(op, name string, kind, cause error) error) *Package {
	c := *p
	c.Error = errf
	return &c
}

// NilRelease is the error of Release on a nil lock.
func (p *Package) NilRelease() error {
	return p.Error("release", "", p.NotHeld, errors.New("nil "+p.Noun))
}

// NilHandle is the error of an acquisition through a nil receiver (what:
// "Manager", "Locker").
func (p *Package) NilHandle(op, name, what string) error {
	return p.Error(op, name, nil, errkind.New(sqlock.ErrNilHandle, "%s: nil %s", p.Name, what))
}
