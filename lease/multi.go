package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// MultiLease is several leases taken together by [Manager.AcquireAll]: held
// all at once, renewed together (one statement), lost together, released
// together. Its methods are safe for concurrent use.
type MultiLease struct {
	a  *multiAcquisition
	tl ttllock.Lock
}

// AcquireAll takes the leases called names for ttl, all or none: in one
// statement, so no holder of some of them is ever left behind, even by a
// process killed mid-call. The names are taken in their canonical order
// (sorted, each once), so calls asking for overlapping sets in any order
// cannot deadlock. It waits, as [Manager.Acquire] does, until every name is
// free and no waiter queues for any of them; it holds no ticket meanwhile,
// so a name waited for by a steady queue may keep it waiting until its
// bound ([ErrTimeout]). No name: [ErrInvalid], as a bad name is; nothing is
// sent.
func (m *Manager) AcquireAll(ctx context.Context, names []string, ttl time.Duration) (*MultiLease, error) {
	return m.all(ctx, "acquireall", names, ttl, true)
}

// TryAcquireAll is AcquireAll without the wait: if any of the names is held
// or queued for, it returns an error matching [ErrNotAcquired] at once,
// holding none.
func (m *Manager) TryAcquireAll(ctx context.Context, names []string, ttl time.Duration) (*MultiLease, error) {
	return m.all(ctx, "tryacquireall", names, ttl, false)
}

func (m *Manager) all(ctx context.Context, op string, names []string, ttl time.Duration, wait bool) (*MultiLease, error) {
	canon := slices.Clone(names)
	slices.Sort(canon)
	canon = slices.Compact(canon)
	label := strings.Join(canon, ",")
	if m == nil {
		return nil, kit.NilHandle(op, label, "Manager")
	}
	list, _ := json.Marshal(canon)
	a := &multiAcquisition{m: m, names: canon, list: string(list), owner: newOwner(), listen: m.ntf != nil}
	defer func() { a.sub.close() }() // the subscription of the last pause
	return ttllock.Acquire(ctx, &m.base, a, ttllock.Request{Op: op, Name: label, TTL: ttl, Wait: wait},
		func() (*MultiLease, *ttllock.Lock) {
			l := &MultiLease{a: a}
			return l, &l.tl
		})
}

// Names are the leases' names, in their canonical order.
func (l *MultiLease) Names() []string { return slices.Clone(l.a.names) }

// Token is the fencing token of the lease called name, and whether it is
// one of them.
func (l *MultiLease) Token(name string) (int64, bool) {
	i, ok := slices.BinarySearch(l.a.names, name)
	if !ok {
		return 0, false
	}
	return l.a.tokens[i], true
}

// Holder and Payload are what the Manager stored with each of the leases
// (WithHolder, WithPayload).
func (l *MultiLease) Holder() string { return l.a.m.cfg.holder }

// Payload is a copy of the bytes stored with each of the leases.
func (l *MultiLease) Payload() []byte { return slices.Clone(l.a.m.cfg.payload) }

// Deadline is the local time until which the leases are trusted (see
// [Lease.Deadline]).
func (l *MultiLease) Deadline() time.Time { return l.tl.Deadline() }

// Lost is closed when the leases can no longer be trusted: any of them was
// refused a renewal, or none was confirmed in time (see [Lease.Lost]).
func (l *MultiLease) Lost() <-chan struct{} { return l.tl.Lost() }

// Err is nil while the leases are trusted, then an error matching
// [ErrLost].
func (l *MultiLease) Err() error { return l.tl.Err() }

// Context returns a context derived from parent that ends when the leases
// are lost or cancel is called. It carries no fencing token (there is one
// per name: [MultiLease.Token]).
func (l *MultiLease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.tl.Context(parent)
}

// Release ends every one of the leases that is still this holder's, in one
// statement, and wakes their waiters: nil if all were; an error matching
// [ErrNotHeld] if some or all had expired or been taken over, or Release
// already ran.
func (l *MultiLease) Release(ctx context.Context) error {
	if l == nil {
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}

// multiAcquisition is one AcquireAll: the store and, once granted, the
// leases' server side.
type multiAcquisition struct {
	m      *Manager
	names  []string
	list   string // names as a JSON array: one text parameter on every driver
	owner  string
	ttl    time.Duration
	tokens []int64
	busy   string        // the first name found held, to wait for
	sub    *subscription // its release notifications
	listen bool
}

// Check refuses bad input before anything is sent: every name as Acquire
// checks it, and at least one.
func (a *multiAcquisition) Check(_ string, ttl time.Duration) (time.Duration, error) {
	if len(a.names) == 0 {
		return 0, errors.New("no name")
	}
	for _, n := range a.names {
		if err := a.m.check(n, ttl); err != nil {
			return 0, fmt.Errorf("%q: %w", n, err)
		}
	}
	return ttl, nil
}

// Grant is one attempt at all the names.
func (a *multiAcquisition) Grant(ctx context.Context, _ string, ttl time.Duration, _ bool) (ttllock.Grant, error) {
	a.ttl = ttl
	var tokens string
	var remaining int64
	err := a.m.b.queryRow(ctx, a.m.stmt.acquireAll,
		[]any{a.list, a.owner, ttl.Microseconds(), a.m.cfg.holder, a.m.cfg.payload}, &tokens, &remaining, &a.busy)
	switch {
	case pgerror.Code(err) == pgerror.InvalidTextRepr && strings.Contains(err.Error(), partialMarker):
		// Some rows were taken by others between the snapshot and the
		// insert: all was undone. Try again soon.
		return ttllock.Grant{Remaining: 0}, nil
	case err != nil:
		// The answer may be lost with a grant in it: give it back.
		cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		a.m.b.queryRow(cctx, a.m.stmt.releaseAll, []any{a.list, a.owner}, &remaining)
		return ttllock.Grant{}, schemaError(a.m.cfg.table, err)
	case tokens != "":
		for _, t := range strings.Split(tokens, ",") {
			n, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return ttllock.Grant{}, err
			}
			a.tokens = append(a.tokens, n)
		}
		return ttllock.Grant{Held: a}, nil
	}
	return ttllock.Grant{Remaining: time.Duration(remaining) * time.Microsecond}, nil
}

// Pause waits for the first name found held to be released (subscribing
// first, then trying at once, as a lease's waiter does), its expiry, or a
// poll.
func (a *multiAcquisition) Pause(ctx context.Context, remaining time.Duration) error {
	if a.sub != nil && (a.sub.dead.Load() || a.sub.name != a.busy) {
		a.sub.close()
		a.sub = nil
	}
	if a.sub == nil && a.listen && a.busy != "" {
		s, err := a.m.ntf.subscribe(ctx, a.busy)
		if err == nil {
			a.sub = s
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.listen = false
	}
	return a.m.pause(ctx, a.sub, remaining, 0)
}

// Renew extends every one of the leases, owner-checked: refused unless all
// were still this holder's.
func (a *multiAcquisition) Renew(ctx context.Context) (refused bool, err error) {
	var n int64
	err = a.m.b.queryRow(ctx, a.m.stmt.renewAll, []any{a.list, a.owner, a.ttl.Microseconds()}, &n)
	switch {
	case err != nil:
		return permanent(err), err
	case n < int64(len(a.names)):
		return true, fmt.Errorf("%d of the %d leases are no longer this holder's", int64(len(a.names))-n, len(a.names))
	}
	return false, nil
}

// Release ends every one of the leases still this holder's.
func (a *multiAcquisition) Release(ctx context.Context) (notHeld bool, err error) {
	var n int64
	err = a.m.b.queryRow(ctx, a.m.stmt.releaseAll, []any{a.list, a.owner}, &n)
	return err == nil && n < int64(len(a.names)), err
}
