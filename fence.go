package sqlock

import "context"

// fencingTokenKey is the context key of a fencing token; unexported, so
// only WithFencingToken can set it.
type fencingTokenKey struct{}

// WithFencingToken returns a copy of ctx that carries token, the fencing
// token of the lock the caller holds ([Fenced.Token], lease's
// (*Lease).Token). The fenced writes of versioned, sqlxhelpers and
// gormplugin read it from there for models with a lock:"fence" field: the
// row is written only if its fence column is at most token, and the fence
// becomes token, so a holder that lost the lock (a newer holder has written
// with a larger token) is refused by the database itself.
//
//	ctx = sqlock.WithFencingToken(ctx, l.Token())
//	err := h.Update(ctx, "orders", &o) // refused with versioned.ErrFenced after a takeover
//
// A token must be positive; the writes refuse any other value before
// sending anything. The last WithFencingToken on a context wins.
func WithFencingToken(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, fencingTokenKey{}, token)
}

// FencingToken returns the fencing token ctx carries and whether it
// carries one (see [WithFencingToken]).
func FencingToken(ctx context.Context) (token int64, ok bool) {
	if ctx == nil {
		return 0, false
	}
	token, ok = ctx.Value(fencingTokenKey{}).(int64)
	return token, ok
}
