package httpver_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/httpver"
)

// Every answer RFC 9110 §13.1.1 (and RFC 6585 for 428) prescribes for a
// conditional PUT, on a row at version 3: what the client sees, what the
// row is afterwards. A refusal changes nothing.
func TestIfMatchAnswers(t *testing.T) {
	ctx := ctxT(t)
	e := newEnv(t, false)
	e.seed(1, 3)
	e.seed(2, 3)
	base := e.serve("versioned")
	c := &http.Client{}
	cases := []struct {
		name    string
		id      string
		ifMatch []string // field lines; nil: no If-Match
		status  int
		etag    string // the answer's ETag header
		wrote   bool
	}{
		{"missing", "1", nil, http.StatusPreconditionRequired, "", false},
		{"current", "1", []string{"{cur}"}, http.StatusOK, "", true},
		{"weak current", "1", []string{"W/" + "{cur}"}, http.StatusPreconditionFailed, "", false},
		{"old version", "1", []string{"{old}"}, http.StatusPreconditionFailed, "", false},
		{"other row's tag", "1", []string{e.kind.ETag("2", 3)}, http.StatusPreconditionFailed, "", false},
		{"other kind's tag", "1", []string{httpver.MustKind("invoice").ETag("1", 3)}, http.StatusPreconditionFailed, "", false},
		{"foreign tag", "1", []string{`"abc"`}, http.StatusPreconditionFailed, "", false},
		{"non-canonical version", "1", []string{`"order:MQ:v03"`}, http.StatusPreconditionFailed, "", false},
		{"list with current", "1", []string{`"abc", W/"x",{cur}`}, http.StatusOK, "", true},
		{"lines, one current", "1", []string{`"abc"`, "{cur}"}, http.StatusOK, "", true},
		{"two versions, older current", "1", []string{"{cur}, {next5}"}, http.StatusOK, "", true},
		{"empty list", "1", []string{" , "}, http.StatusPreconditionFailed, "", false},
		{"star", "1", []string{"*"}, http.StatusOK, "", true},
		{"unquoted", "1", []string{"order:MQ:v3"}, http.StatusBadRequest, "", false},
		{"unterminated", "1", []string{`"order:MQ:v3`}, http.StatusBadRequest, "", false},
		{"lower-case weak", "1", []string{"w/" + "{cur}"}, http.StatusBadRequest, "", false},
		{"space inside", "1", []string{`"a b"`}, http.StatusBadRequest, "", false},
		{"no comma", "1", []string{`{cur} "abc"`}, http.StatusBadRequest, "", false},
		{"star and a tag", "1", []string{"*, " + "{cur}"}, http.StatusBadRequest, "", false},
		{"star on its own line and a tag", "1", []string{"{cur}", "*"}, http.StatusBadRequest, "", false},
		{"gone row", "9", []string{e.kind.ETag("9", 3)}, http.StatusNotFound, "", false},
		{"gone row, star", "9", []string{"*"}, http.StatusNotFound, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pg := e.row(1)
			before := pg.Version
			var h []string
			fill := strings.NewReplacer("{cur}", e.kind.ETag("1", before), "{old}", e.kind.ETag("1", before-1),
				"{next5}", e.kind.ETag("1", before+5))
			for _, v := range tc.ifMatch {
				h = append(h, "If-Match", fill.Replace(v))
			}
			got := do(t, ctx, c, http.MethodPut, base+"/orders/"+tc.id, edit{Status: "x", Note: tc.name}, h...)
			want := tc.etag
			if tc.wrote || tc.status == http.StatusPreconditionFailed {
				want = e.kind.ETag("1", before+b2i(tc.wrote))
			}
			if got.status != tc.status || got.etag != want {
				t.Fatalf("%d ETag %q body %s, want %d ETag %q", got.status, got.etag, got.body, tc.status, want)
			}
			if tc.status != http.StatusOK && (got.problem == nil || got.problem["status"] != float64(tc.status) || got.problem["title"] != http.StatusText(tc.status)) {
				t.Fatalf("problem body %s: want an RFC 9457 problem with status %d", got.body, tc.status)
			}
			after := e.row(1)
			if tc.wrote != (after.Version == before+1) || (!tc.wrote && after != pg) {
				t.Fatalf("row %+v after %+v: wrote=%v", after, pg, tc.wrote)
			}
		})
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Update's error tells the handler what it answered, by sentinel; a
// write's own failure is returned untouched, with nothing written.
func TestUpdateErrors(t *testing.T) {
	k := httpver.MustKind("order")
	run := func(ifMatch string, werr error) (*httptest.ResponseRecorder, error) {
		r := httptest.NewRequest(http.MethodPut, "/orders/1", nil)
		if ifMatch != "" {
			r.Header.Set("If-Match", ifMatch)
		}
		w := httptest.NewRecorder()
		_, err := k.Update(w, r, "1", func(context.Context, int64) (int64, error) { return 0, werr })
		return w, err
	}
	for _, tc := range []struct {
		ifMatch string
		want    error
	}{
		{"", httpver.ErrPreconditionRequired},
		{"nope", httpver.ErrMalformed},
		{`W/"x"`, httpver.ErrPreconditionFailed},
	} {
		w, err := run(tc.ifMatch, nil)
		var answered *httpver.Error
		if !errors.Is(err, tc.want) || !errors.As(err, &answered) || answered.Status != w.Code {
			t.Errorf("If-Match %q: %v (answered %d), want %v", tc.ifMatch, err, w.Code, tc.want)
		}
	}
	boom := errors.New("connection reset")
	w, err := run(k.ETag("1", 1), boom)
	var answered *httpver.Error
	if !errors.Is(err, boom) || errors.As(err, &answered) || w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Errorf("a failed write: %v, answered %d %q; want the write's error and nothing written", err, w.Code, w.Body)
	}
	w, err = run("*", nil)
	if !errors.Is(err, sqlock.ErrUnsupported) || w.Body.Len() != 0 {
		t.Errorf("If-Match: * without WithCurrent: %v, answered %d", err, w.Code)
	}
}

// With the write's probe (versioned.WithProbe, gormplugin.WithProbe) the
// 412 and 404 need no CurrentFunc: the stale error says what the row is.
func TestProbedStaleNeedsNoRead(t *testing.T) {
	for _, path := range []string{"versioned", "gorm"} {
		t.Run(path, func(t *testing.T) {
			ctx := ctxT(t)
			e := newEnv(t, true)
			e.kind = httpver.MustKind("order") // no CurrentFunc
			e.seed(1, 5)
			url := e.serve(path) + "/orders/"
			c := &http.Client{}
			got := do(t, ctx, c, http.MethodPut, url+"1", edit{}, "If-Match", e.kind.ETag("1", 4))
			if got.status != http.StatusPreconditionFailed || got.etag != e.kind.ETag("1", 5) {
				t.Fatalf("stale: %d ETag %q, want 412 %s", got.status, got.etag, e.kind.ETag("1", 5))
			}
			got = do(t, ctx, c, http.MethodPut, url+"2", edit{}, "If-Match", e.kind.ETag("2", 4))
			if got.status != http.StatusNotFound {
				t.Fatalf("gone: %d %s, want 404", got.status, got.body)
			}
		})
	}
}

// A GET answers 304 to If-None-Match naming the version it reads (weak
// comparison, so W/ matches too) and to "*", with the ETag; anything
// else, a malformed field included, gets the representation.
func TestIfNoneMatch(t *testing.T) {
	ctx := ctxT(t)
	e := newEnv(t, false)
	e.seed(1, 3)
	url := e.serve("versioned") + "/orders/1"
	c := &http.Client{}
	cur := e.kind.ETag("1", 3)
	for _, tc := range []struct {
		inm    string
		status int
	}{
		{cur, http.StatusNotModified},
		{"W/" + cur, http.StatusNotModified},
		{`"x", ` + cur, http.StatusNotModified},
		{"*", http.StatusNotModified},
		{e.kind.ETag("1", 2), http.StatusOK},
		{"garbage", http.StatusOK},
	} {
		got := do(t, ctx, c, http.MethodGet, url, nil, "If-None-Match", tc.inm)
		if got.status != tc.status || got.etag != cur || (tc.status == http.StatusNotModified && len(got.body) != 0) {
			t.Errorf("If-None-Match %s: %d ETag %q body %q, want %d with %s", tc.inm, got.status, got.etag, got.body, tc.status, cur)
		}
	}
}
