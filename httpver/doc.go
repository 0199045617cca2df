// Package httpver carries a row's optimistic lock to HTTP clients: the
// version column becomes the resource's ETag, and a client's If-Match
// becomes the expected version of the write (RFC 9110 conditional
// requests), so two people editing one order in two tabs cannot overwrite
// each other's edit.
//
//	orders := httpver.MustKind("order", httpver.WithCurrent(currentVersion))
//
//	// GET: the ETag of the version read (304 for a matching If-None-Match).
//	if orders.Read(w, r, id, o.Version) { return }
//
//	// PUT: the If-Match version is the write's expected version.
//	v, err := orders.Update(w, r, id, func(ctx context.Context, expected int64) (int64, error) {
//		return versioned.Update(ctx, db, table, id, expected, versioned.Set("status", s))
//	})
//	var answered *httpver.Error
//	if errors.As(err, &answered) { return } // 400, 404, 412 or 428 sent
//
// It promises:
//
//   - The version is compared by the database, in the write's own
//     UPDATE … WHERE version = $expected, never read and compared in Go:
//     of concurrent writes with one ETag exactly one succeeds, and a
//     winning request costs the round trips of the write alone.
//   - A stale write is 412 Precondition Failed with the current ETag (from
//     the write's probe, or one read on the losing path only); a missing
//     If-Match is 428 Precondition Required; a malformed one 400; a gone
//     row 404 — each with an RFC 9457 problem body ([Error]).
//   - Strong comparison: a weak tag never matches a write, and a tag names
//     one resource at one version ([Kind.ETag]), so no tag of another row
//     matches.
//
// [Kind.Update] takes the write as a [WriteFunc], so it serves
// [versioned.Update], sqlxhelpers' Helper.Update and gormplugin writes
// alike; [ParseCondition] is the If-Match parser. Behind idem.Middleware
// (with idem.WithMethods("PUT")) a retried PUT replays its first answer,
// ETag included, rather than a 412 against its own success. The design,
// the ETag format and the status table are in docs/http.md.
package httpver
