// Package heldkeys records in a context the advisory locks its caller holds,
// so that packages advisory and txlock can refuse, at once and with a typed
// error, a request that would wait for a lock the same call chain holds.
// Such a request runs on another connection of the pool: it waits for the
// holder, which waits for the request to return — a cycle PostgreSQL cannot
// see, ended only by a timeout. Session and transaction advisory locks share
// one lock space, so a session lock (advisory) and a transaction lock
// (txlock) on the same key and database conflict with each other as well.
//
// Locks live in a database; the package knows databases only by the handle
// a lock was taken through (*sql.DB, *pgxpool.Pool, …). Holds through the
// same handle are compared; holds through different handles never conflict
// (they may be different databases), so two pools on one database are not
// recognised as such.
package heldkeys

import (
	"context"
	"reflect"
	"slices"
)

// Tag is an advisory lock's identity in pg_locks: (classid, objid,
// objsubid), the same for a session and a transaction lock on one key.
type Tag struct {
	ClassID, ObjID uint32
	ObjSubID       int16
}

// Hold is one held lock (or set of locks taken together).
type Hold struct {
	// Handle is the database handle the locks were taken through; nil if
	// unknown or not comparable (then the hold conflicts with nothing).
	Handle any
	Tags   []Tag
	Shared bool
	// Ended reports that the locks have been released although the context
	// still carries the hold (nil: held for the context's life).
	Ended func() bool
	// Owner is who took the locks (advisory: its *Locker), for a package's
	// own rules about its holds.
	Owner any

	outer *Hold
}

type ctxKey struct{}

// With returns ctx carrying h on top of the holds ctx already carries. h
// must not be changed afterwards.
func With(ctx context.Context, h *Hold) context.Context {
	if h.Handle != nil && !reflect.TypeOf(h.Handle).Comparable() {
		h.Handle = nil
	}
	h.outer, _ = ctx.Value(ctxKey{}).(*Hold)
	return context.WithValue(ctx, ctxKey{}, h)
}

// Each calls f for every live hold ctx carries, innermost first, until f
// returns false.
func Each(ctx context.Context, f func(*Hold) bool) {
	for h, _ := ctx.Value(ctxKey{}).(*Hold); h != nil; h = h.outer {
		if h.Ended != nil && h.Ended() {
			continue
		}
		if !f(h) {
			return
		}
	}
}

// Conflict returns a tag of tags that a live hold in ctx, taken through the
// same handle, holds in a mode that conflicts with shared (either is
// exclusive); ok is false if there is none, and always for a nil or
// uncomparable handle.
func Conflict(ctx context.Context, handle any, tags []Tag, shared bool) (tag Tag, ok bool) {
	if handle == nil || !reflect.TypeOf(handle).Comparable() {
		return Tag{}, false
	}
	Each(ctx, func(h *Hold) bool {
		if h.Handle != handle || h.Shared && shared {
			return true
		}
		for _, t := range tags {
			if slices.Contains(h.Tags, t) {
				tag, ok = t, true
				return false
			}
		}
		return true
	})
	return tag, ok
}
