package ttllock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/lazytimer"
	"github.com/sqlock/sqlock/observe"
)

// Store is a backend's server side of acquiring a lock: what is its own.
// Renewal and release are the granted lock's [Held].
type Store interface {
	// Check refuses a bad name or TTL before anything is sent: it returns
	// the TTL the backend will use (in its own unit: Redis counts whole
	// milliseconds), or why not — the cause of the package's Invalid error.
	Check(name string, ttl time.Duration) (time.Duration, error)
	// Grant makes one attempt to take name for ttl for a new owner, and
	// reports the grant (Grant.Held set) or why not. A backend that waits
	// in a queue of its own may, when wait is set, block until the lock is
	// granted or ctx ends; any other returns at once, and the toolkit
	// pauses and calls again. If the answer to an attempt may have been
	// lost, Grant gives back what the server may have granted before it
	// returns the error. An error is the package's Error's cause (or, made
	// by [Refuse], its sentinel and cause); when ctx has ended, the
	// context's end is reported instead.
	Grant(ctx context.Context, name string, ttl time.Duration, wait bool) (Grant, error)
}

// Pauser is a Store that waits its own way between attempts (lease: for a
// release's notification). A Store that is not one waits by a jittered
// backoff from 4 ms to 64 ms, never much past the holder's expiry.
type Pauser interface {
	// Pause returns when the next attempt is due (nil) or when ctx ended
	// (ctx's error). remaining is the last Grant's.
	Pause(ctx context.Context, remaining time.Duration) error
}

// Admitter is a Store that refuses a TTL by what it measured: Admit runs
// once per acquisition after the input check, with the wait's bound set;
// its error ends the acquisition (make it with [Refuse] to give it the
// package's sentinel).
type Admitter interface {
	Admit(ctx context.Context, ttl time.Duration) error
}

// Grant is an attempt's answer.
type Grant struct {
	// Held is the granted lock's server side; nil: not granted.
	Held Held
	// Token is the fencing token minted with the grant; 0: the backend
	// mints none (the lock is then no sqlock.Fenced).
	Token int64
	// Sent is when the request whose answer starts the trust window was
	// sent, if not when Grant was called (a queued waiter that renewed
	// while it waited).
	Sent time.Time
	// Remaining, when not granted: how long the holder has left (> 0), or
	// that the lock had expired but another took it first (0), or unknown
	// (< 0).
	Remaining time.Duration
	// Refused, when not granted: a reason other than a holder (a Redlock
	// attempt that fewer than a majority answered), made by [Refuse]. A
	// try-once returns it instead of NotAcquired, and a wait that runs out
	// joins it to its cause.
	Refused error
}

// Held is a granted lock's server side: each request is owner-checked.
type Held interface {
	// Renew extends the lock by its TTL from when the server sees the
	// request. refused: the server no longer has the lock as this
	// holder's, and the hold is lost (err, if not nil, says why); otherwise
	// a non-nil err is transient and the renewal is tried again.
	Renew(ctx context.Context) (refused bool, err error)
	// Release ends the lock where it is still this holder's. notHeld: it
	// was not (any more), and nothing changed.
	Release(ctx context.Context) (notHeld bool, err error)
}

// Refuse makes an error that the toolkit reports as the package's error
// matching kind, one of the package's sentinels, with cause.
func Refuse(kind, cause error) error { return &refusal{kind, cause} }

type refusal struct{ kind, cause error }

func (r *refusal) Error() string { return errors.Join(r.kind, r.cause).Error() }

// Base is the toolkit's part of a package's Manager or Locker.
type Base struct {
	p      *Package
	cfg    Config
	err    error           // New's: every acquisition returns it
	timers lazytimer.Queue // the held locks' deadlines and renewals
}

// Init sets b up for p with the options' cfg; err, if not nil, is New's
// error (an invalid option, a nil handle), which every acquisition returns
// as it is.
func (b *Base) Init(p *Package, cfg Config, err error) {
	b.p, b.cfg, b.err = p, cfg, err
}

// Err is New's error.
func (b *Base) Err() error { return b.err }

// Request is one acquisition.
type Request struct {
	Op   string // "acquire" or "tryacquire", in its errors
	Name string
	TTL  time.Duration
	Wait bool // Acquire (wait for the holder) rather than TryAcquire
}

// Acquire takes the lock r asks for from s, through the Manager's or
// Locker's b: it checks the input (nothing is sent for bad input: the
// package's Invalid), bounds the wait (WithTimeout and the caller's
// deadline, told apart as [WaitEnd] does), makes attempts and pauses
// between them while r.Wait, and reports the outcome to the observer. A
// granted lock is made by wrap — the package's lock type, and the Lock it
// embeds — and started: reported to the observer (should it panic, the
// lock is released first), then renewed every TTL/3 until Release, with
// Lost at the trust window's end.
func Acquire[L any](ctx context.Context, b *Base, s Store, r Request, wrap func() (L, *Lock)) (L, error) {
	if b.cfg.Observer == nil {
		return acquire(ctx, b, s, r, wrap, time.Time{})
	}
	start := time.Now()
	l, err := acquire(ctx, b, s, r, wrap, start)
	ObserveFailure(ctx, b.cfg.Observer, b.event(r.Name), start, err, b.p.Invalid)
	return l, err
}

func acquire[L any](ctx context.Context, b *Base, s Store, r Request, wrap func() (L, *Lock), began time.Time) (L, error) {
	var none L
	p := b.p
	if b.err != nil {
		return none, b.err
	}
	ttl, err := s.Check(r.Name, r.TTL)
	if err != nil {
		return none, p.Error(r.Op, r.Name, p.Invalid, err)
	}
	if ctx == nil {
		return none, p.Error(r.Op, r.Name, nil, errkind.New(sqlock.ErrNilHandle, "%s: nil context", p.Name))
	}
	if r.Wait || p.BoundTry {
		var cancel context.CancelFunc
		ctx, cancel = BoundWait(ctx, b.cfg.Timeout)
		defer cancel()
	}
	if a, ok := s.(Admitter); ok {
		if err := a.Admit(ctx, ttl); err != nil {
			return none, b.failed(ctx, r, err, nil)
		}
	}
	var bo backoff
	for {
		sent := time.Now()
		g, err := s.Grant(ctx, r.Name, ttl, r.Wait)
		if err != nil {
			return none, b.failed(ctx, r, err, nil)
		}
		if g.Held != nil {
			if !g.Sent.IsZero() {
				sent = g.Sent
			}
			l, lk := wrap()
			lk.start(ctx, b, r.Name, ttl, g, began, sent)
			return l, nil
		}
		var refused error
		if g.Refused != nil {
			refused = b.wrap(r, g.Refused)
		}
		switch {
		case ctx.Err() != nil:
			return none, b.ctxError(ctx, r, refused)
		case !r.Wait && refused != nil:
			return none, refused
		case !r.Wait:
			return none, p.Error(r.Op, r.Name, p.NotAcquired, nil)
		}
		if ps, ok := s.(Pauser); ok {
			err = ps.Pause(ctx, g.Remaining)
		} else {
			err = bo.pause(ctx, g.Remaining)
		}
		if err != nil {
			return none, b.failed(ctx, r, err, refused)
		}
	}
}

// failed is an attempt's failure: the end of ctx if it has ended (last
// joined to its cause), the error otherwise.
//
// A failure after ctx's deadline is the deadline's: a client that ends its
// commands at their context's deadline (go-redis with
// ContextTimeoutEnabled, a socket deadline) can fail the attempt with its
// own i/o timeout a moment before the context's timer has marked ctx done.
// failed waits for that mark rather than report the store as failing.
func (b *Base) failed(ctx context.Context, r Request, err, last error) error {
	if dl, ok := ctx.Deadline(); ok && ctx.Err() == nil && !time.Now().Before(dl) {
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		return b.ctxError(ctx, r, last)
	}
	return b.wrap(r, err)
}

// wrap is err as the package's error for r.
func (b *Base) wrap(r Request, err error) error {
	if rf, ok := err.(*refusal); ok {
		return b.p.Error(r.Op, r.Name, rf.kind, rf.cause)
	}
	return b.p.Error(r.Op, r.Name, nil, err)
}

// ctxError turns the end of an acquisition's context into an error: a
// wait that ran out is the package's Timeout — matching
// context.DeadlineExceeded only when the caller's deadline, not
// WithTimeout, ended it — and a cancellation is the context's cause. last,
// when not nil, is the last attempt's refusal.
func (b *Base) ctxError(ctx context.Context, r Request, last error) error {
	timedOut, cause := WaitEnd(ctx)
	if last != nil {
		cause = errors.Join(cause, last)
	}
	if timedOut {
		return b.p.Error(r.Op, r.Name, b.p.Timeout, cause)
	}
	return b.p.Error(r.Op, r.Name, nil, cause)
}

// event is the observer's event for the lock called name.
func (b *Base) event(name string) observe.Event {
	return observe.Event{Source: b.p.Name, System: b.p.System, Name: name}
}

// The default pause between attempts: jittered, doubling from backoffMin
// to backoffMax, never much past the holder's expiry.
const (
	backoffMin = 4 * time.Millisecond
	backoffMax = 64 * time.Millisecond
)

type backoff struct{ d time.Duration }

func (w *backoff) pause(ctx context.Context, remaining time.Duration) error {
	w.d = max(backoffMin, min(2*w.d, backoffMax))
	d := w.d
	if remaining > 0 {
		d = min(d, remaining+time.Millisecond)
	}
	t := time.NewTimer(d/2 + rand.N(d/2+1))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff is the default pause between attempts, for a package that polls
// in a frame of its own (dynamo's record-version watch): the zero value is
// ready, and each Pause doubles the next.
type Backoff struct{ b backoff }

// Pause returns when the next attempt is due (nil) or when ctx ended
// (ctx's error); remaining, if positive, is how long the holder has left.
func (w *Backoff) Pause(ctx context.Context, remaining time.Duration) error {
	return w.b.pause(ctx, remaining)
}

// Acquirer is a package's sqlock.Acquirer of locks that last ttl: acquire
// and try are its Acquire and TryAcquire (method values of a Manager or
// Locker, which may be nil). A failed acquisition's typed nil lock never
// becomes a non-nil sqlock.Lock.
func Acquirer[L sqlock.Lock](acquire, try func(context.Context, string, time.Duration) (L, error), ttl time.Duration) sqlock.Acquirer {
	return acquirer[L]{acquire, try, ttl}
}

type acquirer[L sqlock.Lock] struct {
	acquire, try func(context.Context, string, time.Duration) (L, error)
	ttl          time.Duration
}

func (a acquirer[L]) Acquire(ctx context.Context, name string) (sqlock.Lock, error) {
	return asLock(a.acquire(ctx, name, a.ttl))
}

func (a acquirer[L]) TryAcquire(ctx context.Context, name string) (sqlock.Lock, error) {
	return asLock(a.try(ctx, name, a.ttl))
}

func asLock[L sqlock.Lock](l L, err error) (sqlock.Lock, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}
