package httpver

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// Sentinels, one per answer [Kind.Update] gives a client itself. Each is
// returned as an *[Error] that matches it through errors.Is, after the
// response has been written.
var (
	// ErrMalformed: the If-Match field is not RFC 9110's grammar. 400 Bad
	// Request.
	ErrMalformed = errors.New("httpver: malformed If-Match")
	// ErrPreconditionFailed: no tag in If-Match names the resource's
	// current version — the write went stale, or the tags are weak or of
	// another resource. 412 Precondition Failed, with the current ETag
	// when it is known.
	ErrPreconditionFailed = errors.New("httpver: precondition failed")
	// ErrPreconditionRequired: the conditional write arrived without
	// If-Match. 428 Precondition Required (RFC 6585).
	ErrPreconditionRequired = errors.New("httpver: precondition required")
	// ErrNotFound: no row has the resource's id. 404 Not Found. A
	// [CurrentFunc] returns it (or database/sql.ErrNoRows) for a gone row.
	ErrNotFound = errors.New("httpver: not found")
)

// Error is an answer [Kind.Update] has written: Status (400, 404, 412,
// 428), Detail (the problem body's detail), ETag (the current one on a
// 412, when known) and Err (the write's own error behind it, if any:
// a *versioned.StaleError).
type Error struct {
	Status int
	Detail string
	ETag   string
	Err    error
}

func (e *Error) Error() string {
	s := "httpver: " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) + ": " + e.Detail
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches the sentinel of e's status.
func (e *Error) Is(target error) bool {
	switch e.Status {
	case http.StatusBadRequest:
		return target == ErrMalformed
	case http.StatusPreconditionFailed:
		return target == ErrPreconditionFailed
	case http.StatusPreconditionRequired:
		return target == ErrPreconditionRequired
	case http.StatusNotFound:
		return target == ErrNotFound
	}
	return false
}

func (e *Error) Unwrap() error { return e.Err }

func malformed(detail string) error {
	return &Error{Status: http.StatusBadRequest, Detail: "malformed entity-tag list: " + detail}
}

// problem is an RFC 9457 problem details object. Type is left at its
// default, about:blank, so Title is the status's reason phrase; the
// extension member "etag" repeats the current ETag of a 412.
type problem struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	ETag   string `json:"etag,omitempty"`
}

// write sends e as an application/problem+json response, with the ETag
// header on a 412 that knows the current version.
func (e *Error) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	if e.ETag != "" {
		h.Set("ETag", e.ETag)
	} else {
		h.Del("ETag")
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(problem{Title: http.StatusText(e.Status), Status: e.Status, Detail: e.Detail, ETag: e.ETag})
}
