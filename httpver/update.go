package httpver

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"slices"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/versioned"
)

// WriteFunc is the versioned write a conditional request runs: the
// UPDATE … WHERE id = … AND version = expected of versioned.Update,
// sqlxhelpers' Helper.Update or a gormplugin write of a struct whose
// version field is expected. It returns the row's new version, or the
// write's error: a *versioned.StaleError when the row was not at expected.
type WriteFunc func(ctx context.Context, expected int64) (version int64, err error)

// anyAttempts bounds the writes of one If-Match: * request: each reads the
// row's version and writes at it, and only a concurrent write between the
// two sends it round again.
const anyAttempts = 3

// Update serves a conditional write of resource id (a PUT, PATCH or
// DELETE) by RFC 9110 §13.1.1, strong comparison:
//
//   - no If-Match: 428 Precondition Required, nothing runs;
//   - a malformed If-Match: 400 Bad Request, nothing runs;
//   - a strong tag of this resource: write runs with the tag's version as
//     its expected version, so the database compares it in the UPDATE
//     itself. On success the ETag header is set to the new version and
//     Update returns it with a nil error: write the status and body.
//   - the write went stale: 412 Precondition Failed with the current ETag
//     (from the write's probe, else one [CurrentFunc] read: the only
//     extra query, on the losing path only), or 404 Not Found when the row
//     is gone;
//   - only weak tags, or tags of other resources: 412 (weak tags never
//     match under strong comparison), nothing is written;
//   - "*": the row's current version is read and written at (404 when
//     there is no row).
//
// Every answer Update writes itself is an RFC 9457 problem body, and the
// returned error is an *[Error] matching [ErrMalformed],
// [ErrPreconditionFailed], [ErrPreconditionRequired] or [ErrNotFound].
// Any other error of write's (a fenced write, a lost connection) is
// returned as it is with nothing written: answer it as the handler
// answers its other failures. A 404 follows RFC 9110 §13.2.1: a request
// that would be a 404 without its preconditions is one with them.
//
// Several strong tags of the resource in one If-Match are tried newest
// first; when the write names another listed version as current, that
// one is written (at most two writes).
func (k *Kind) Update(w http.ResponseWriter, r *http.Request, id string, write WriteFunc) (int64, error) {
	values := r.Header.Values("If-Match")
	if len(values) == 0 {
		return 0, answer(w, &Error{Status: http.StatusPreconditionRequired,
			Detail: "this resource is written only with If-Match: send the ETag of the version you read"})
	}
	cond, err := ParseCondition(values)
	if err != nil {
		return 0, answer(w, err.(*Error))
	}
	ctx := r.Context()
	if cond.Any {
		return k.updateAny(ctx, w, id, write)
	}
	var versions []int64
	for _, t := range cond.Tags {
		if v, ok := k.versionOf(t, id); ok && !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		cur, gone, cause := k.readCurrent(ctx, id)
		return 0, k.refuse(w, id, cur, gone, cause, "If-Match names no current version of this resource (a weak tag never matches a write)")
	}
	slices.Sort(versions)
	expected := versions[len(versions)-1]
	for attempt := 0; ; attempt++ {
		v, err := write(ctx, expected)
		if err == nil {
			w.Header().Set("ETag", k.ETag(id, v))
			return v, nil
		}
		if !errors.Is(err, versioned.ErrStale) {
			return 0, err // not the precondition's failure: the caller's to answer
		}
		cur, gone, err := k.afterStale(ctx, id, err)
		if attempt == 0 && !gone && cur != nil && *cur != expected && slices.Contains(versions, *cur) {
			expected = *cur
			continue
		}
		return 0, k.refuse(w, id, cur, gone, err, "the resource has changed since the version If-Match names")
	}
}

// updateAny serves If-Match: *: the condition holds while a row exists.
func (k *Kind) updateAny(ctx context.Context, w http.ResponseWriter, id string, write WriteFunc) (int64, error) {
	if k.current == nil {
		return 0, errkind.New(sqlock.ErrUnsupported, "httpver: If-Match: * needs the kind's WithCurrent to read the row's version")
	}
	var cur *int64
	var cause error
	for range anyAttempts {
		var gone bool
		cur, gone, cause = k.readCurrent(ctx, id)
		if gone {
			return 0, k.refuse(w, id, nil, true, cause, "")
		}
		if cur == nil {
			return 0, cause
		}
		v, err := write(ctx, *cur)
		if err == nil {
			w.Header().Set("ETag", k.ETag(id, v))
			return v, nil
		}
		if !errors.Is(err, versioned.ErrStale) {
			return 0, err
		}
		cause = err
	}
	cur, gone, _ := k.readCurrent(ctx, id)
	return 0, k.refuse(w, id, cur, gone, cause, "the resource kept changing under If-Match: *")
}

// afterStale finds, after a stale write (err), what the row is now: its
// version (nil when unknown) or gone. The write's probe answers when it
// ran; otherwise the kind's CurrentFunc reads the row.
func (k *Kind) afterStale(ctx context.Context, id string, err error) (*int64, bool, error) {
	var stale *versioned.StaleError
	if errors.As(err, &stale) && stale.Probed {
		switch {
		case stale.Gone:
			return nil, true, err
		case !stale.CurrentNull:
			cur := stale.Current
			return &cur, false, err
		}
	}
	cur, gone, rerr := k.readCurrent(ctx, id)
	if rerr != nil {
		err = errors.Join(err, rerr)
	}
	return cur, gone, err
}

// readCurrent reads the row's version with the kind's CurrentFunc: nil
// when there is none or the read failed (the error).
func (k *Kind) readCurrent(ctx context.Context, id string) (*int64, bool, error) {
	if k.current == nil {
		return nil, false, nil
	}
	v, err := k.current(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound) || errors.Is(err, sql.ErrNoRows):
		return nil, true, nil
	case err != nil:
		return nil, false, err
	}
	return &v, false, nil
}

// refuse answers 404 for a gone row, else 412 with the current ETag when
// it is known.
func (k *Kind) refuse(w http.ResponseWriter, id string, cur *int64, gone bool, cause error, detail string) error {
	if gone {
		return answer(w, &Error{Status: http.StatusNotFound, Detail: "no " + k.name + " has this id", Err: cause})
	}
	e := &Error{Status: http.StatusPreconditionFailed, Detail: detail, Err: cause}
	if cur != nil {
		e.ETag = k.ETag(id, *cur)
		e.Detail += "; its current ETag is in the ETag header"
	}
	return answer(w, e)
}

func answer(w http.ResponseWriter, e *Error) error {
	e.write(w)
	return e
}

// Read sets the ETag header of resource id at version on a response, and
// answers 304 Not Modified when the request is a GET or HEAD whose
// If-None-Match names that version (weak comparison, RFC 9110 §13.1.2) or
// is "*"; it returns true when it has answered, and the handler writes
// nothing more. It costs nothing beyond the read the handler already made.
// A malformed If-None-Match is ignored: the full response is always a
// correct answer to a GET.
func (k *Kind) Read(w http.ResponseWriter, r *http.Request, id string, version int64) bool {
	tag := k.ETag(id, version)
	w.Header().Set("ETag", tag)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	values := r.Header.Values("If-None-Match")
	if len(values) == 0 {
		return false
	}
	cond, err := ParseCondition(values)
	if err != nil {
		return false
	}
	match := cond.Any
	opaque := tag[1 : len(tag)-1]
	for _, t := range cond.Tags {
		match = match || t.Opaque == opaque
	}
	if match {
		w.WriteHeader(http.StatusNotModified)
	}
	return match
}
