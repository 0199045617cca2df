package idem_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// chargeHandler inserts one effects row in the middleware's transaction
// and answers 201 with the row's id, a Location and a header that is not
// kept for replays.
func chargeHandler(t testing.TB, runs *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		var id int64
		var err error
		if tx, ok := idem.TxFrom[pgx.Tx](r.Context()); ok {
			err = tx.QueryRow(r.Context(), `INSERT INTO effects (key, who) VALUES ($1, $2) RETURNING id`, string(body), r.Header.Get("X-User")).Scan(&id)
		} else if tx, ok := idem.TxFrom[*sql.Tx](r.Context()); ok {
			err = tx.QueryRowContext(r.Context(), `INSERT INTO effects (key, who) VALUES ($1, $2) RETURNING id`, string(body), r.Header.Get("X-User")).Scan(&id)
		} else {
			err = errors.New("no transaction in the context")
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/charges/%d", id))
		w.Header().Set("X-Not-Kept", "1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"body":%q}`, id, body)
	})
}

type server struct {
	*httptest.Server
	runs atomic.Int32
}

// newServer serves chargeHandler behind the middleware on db's pgx pool
// (or *sql.DB), with the scope taken from X-User.
func newServer(t *testing.T, db *pgtest.DB, useSQL bool, opts ...idem.Option) *server {
	t.Helper()
	opts = append([]idem.Option{idem.WithScope(func(r *http.Request) string { return r.Header.Get("X-User") })}, opts...)
	var mw func(http.Handler) http.Handler
	var err error
	if useSQL {
		mw, err = idem.Middleware(db.SQL(), opts...)
	} else {
		mw, err = idem.Middleware(openPool(t, db.DSN, nil), opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &server{}
	s.Server = httptest.NewServer(mw(chargeHandler(t, &s.runs)))
	t.Cleanup(s.Close)
	return s
}

type response struct {
	status int
	header http.Header
	body   string
}

func (s *server) post(t testing.TB, user, key, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-User", user)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res.StatusCode, res.Header, string(b)}
}

// TestMiddlewareConcurrentIdenticalRequestsRunOnce: 64 identical requests
// at once (waiting mode): the handler runs once and the 63 others get its
// status, kept headers and body byte for byte, marked as replays.
func TestMiddlewareConcurrentIdenticalRequestsRunOnce(t *testing.T) {
	leakCheck(t)
	for _, useSQL := range []bool{false, true} {
		t.Run(map[bool]string{false: "pgx", true: "sql"}[useSQL], func(t *testing.T) {
			db := newDB(t)
			s := newServer(t, db, useSQL, idem.WithWait())
			res := make([]response, 64)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range res {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					res[i] = s.post(t, "alice", `"order-1"`, "charge 10 EUR")
				}()
			}
			close(start)
			wg.Wait()
			checkOneRunAndReplays(t, db, &s.runs, res)
		})
	}
}

func checkOneRunAndReplays(t *testing.T, db *pgtest.DB, runs *atomic.Int32, res []response) {
	t.Helper()
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	first, replays := -1, 0
	for i, r := range res {
		if r.header.Get("Idempotent-Replayed") == "" {
			if first >= 0 {
				t.Fatalf("responses %d and %d both claim to be the first", first, i)
			}
			first = i
			continue
		}
		replays++
	}
	if first < 0 || replays != len(res)-1 {
		t.Fatalf("first %d, %d replays", first, replays)
	}
	f := res[first]
	if f.status != http.StatusCreated || f.header.Get("X-Not-Kept") != "1" {
		t.Fatalf("first response %+v", f)
	}
	for i, r := range res {
		if r.status != f.status || r.body != f.body ||
			r.header.Get("Location") != f.header.Get("Location") || r.header.Get("Content-Type") != f.header.Get("Content-Type") {
			t.Fatalf("response %d = %+v, want %+v", i, r, f)
		}
		if i != first && r.header.Get("X-Not-Kept") != "" {
			t.Fatalf("replay %d has a header not chosen for replays", i)
		}
	}
}

// TestMiddlewareInProgressIs409: while the first request with a key runs,
// another gets 409 at once (the default); after it, a replay.
func TestMiddlewareInProgressIs409(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	mw, err := idem.Middleware(db.Pool(), idem.WithScope(func(*http.Request) string { return "" }))
	if err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(inside)
			<-release
		}
		fmt.Fprint(w, "done")
	})))
	defer srv.Close()
	s := &server{Server: srv}
	var first response
	done := make(chan struct{})
	go func() { defer close(done); first = s.post(t, "", "k1", "x") }()
	<-inside
	if r := s.post(t, "", "k1", "x"); r.status != http.StatusConflict {
		t.Fatalf("concurrent request: %d %s, want 409", r.status, r.body)
	}
	if r := s.post(t, "", "k1", "other body"); r.status != http.StatusConflict {
		t.Fatalf("concurrent request with another body: %d, want 409", r.status)
	}
	close(release)
	<-done
	if r := s.post(t, "", "k1", "x"); r.status != first.status || r.body != "done" || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after: %+v", r)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

// TestMiddlewareKeyReusedIs422: the same key with a different body (or
// path) is 422 and the handler does not run.
func TestMiddlewareKeyReusedIs422(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	s := newServer(t, db, false)
	if r := s.post(t, "alice", "k", "charge 10"); r.status != http.StatusCreated {
		t.Fatalf("first: %+v", r)
	}
	r := s.post(t, "alice", "k", "charge 99")
	if r.status != http.StatusUnprocessableEntity || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("reuse: %+v, want 422 problem", r)
	}
	if s.runs.Load() != 1 || count(t, db, `SELECT count(*) FROM effects`) != 1 {
		t.Fatal("the handler ran for a reused key")
	}
}

// TestMiddlewareScopesPerPrincipal: the same key from two principals is two
// keys; each replays its own response.
func TestMiddlewareScopesPerPrincipal(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	s := newServer(t, db, false)
	a := s.post(t, "alice", "k", "same body")
	b := s.post(t, "bob", "k", "same body")
	if a.status != http.StatusCreated || b.status != http.StatusCreated || a.body == b.body {
		t.Fatalf("alice %+v, bob %+v: want two executions", a, b)
	}
	if a2, b2 := s.post(t, "alice", "k", "same body"), s.post(t, "bob", "k", "same body"); a2.body != a.body || b2.body != b.body {
		t.Fatal("a principal replayed another's response")
	}
	if n := count(t, db, `SELECT count(DISTINCT who) FROM effects`); n != 2 || s.runs.Load() != 2 {
		t.Fatalf("%d principals' effects, %d runs", n, s.runs.Load())
	}
}

// TestMiddlewareBadKeysAre400: a missing key (when required), an empty,
// over-long, non-ASCII, badly quoted or repeated key is 400 and nothing
// runs; other methods pass through; WithOptionalKey lets keyless requests
// through.
func TestMiddlewareBadKeysAre400(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	s := newServer(t, db, false)
	bad := [][]string{nil, {`""`}, {strings.Repeat("k", 256)}, {`"` + strings.Repeat("k", 256) + `"`}, {"ключ"}, {`"a`}, {`"a"b"`}, {"a b"}, {"a", "b"}}
	for _, values := range bad {
		req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader("x"))
		for _, v := range values {
			req.Header.Add("Idempotency-Key", v)
		}
		res, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Fatalf("key %q: %d, want 400", values, res.StatusCode)
		}
	}
	if s.runs.Load() != 0 {
		t.Fatal("the handler ran for a bad key")
	}
	for _, k := range []string{strings.Repeat("k", 255), `"with \"quotes\" and \\"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"} {
		if r := s.post(t, "", k, "x"); r.status != http.StatusCreated {
			t.Fatalf("key %q: %+v", k, r)
		}
	}
	res, err := s.Client().Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusInternalServerError || s.runs.Load() != 4 {
		// GET passes through untouched: no transaction in the context.
		t.Fatalf("GET: %d, runs %d", res.StatusCode, s.runs.Load())
	}
	opt := newServer(t, db, false, idem.WithOptionalKey())
	if r := opt.post(t, "", "", "x"); r.status != http.StatusInternalServerError || opt.runs.Load() != 1 {
		t.Fatalf("optional key, none given: %+v", r)
	}
	big := newServer(t, db, false, idem.WithMaxBody(4))
	if r := big.post(t, "", "k-big", "12345"); r.status != http.StatusRequestEntityTooLarge || big.runs.Load() != 0 {
		t.Fatalf("over-long body: %+v", r)
	}
	for _, o := range []idem.Option{idem.WithHeader(""), idem.WithMethods(), idem.WithMaxBody(0), idem.WithScope(nil), idem.WithFingerprint(nil)} {
		if _, err := idem.Middleware(db.Pool(), idem.WithScope(func(*http.Request) string { return "" }), o); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Fatalf("bad option: %v", err)
		}
	}
	if _, err := idem.Middleware(db.Pool()); !errors.Is(err, sqlock.ErrInvalidOption) {
		t.Fatalf("no WithScope: %v", err)
	}
}

// TestMiddlewareFailuresLeaveKeyFree: a 5xx response or a panicking
// handler rolls the handler's writes and the key back; a retry runs again.
func TestMiddlewareFailuresLeaveKeyFree(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	mw, err := idem.Middleware(db.Pool(), idem.WithScope(func(*http.Request) string { return "" }))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		tx, _ := idem.TxFrom[pgx.Tx](r.Context())
		if _, err := tx.Exec(r.Context(), `INSERT INTO effects (key) VALUES ('x')`); err != nil {
			t.Error(err)
		}
		switch n {
		case 1:
			http.Error(w, "provider down", http.StatusBadGateway)
		case 2:
			panic(http.ErrAbortHandler)
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	do := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		func() {
			defer func() { _ = recover() }()
			h.ServeHTTP(w, req)
		}()
		return w
	}
	if w := do(); w.Code != http.StatusBadGateway {
		t.Fatalf("first: %d", w.Code)
	}
	if count(t, db, `SELECT count(*) FROM effects`)+count(t, db, `SELECT count(*) FROM sqlock_idem`) != 0 {
		t.Fatal("a 5xx response left its writes or key")
	}
	do() // panics
	if count(t, db, `SELECT count(*) FROM effects`)+count(t, db, `SELECT count(*) FROM sqlock_idem`) != 0 {
		t.Fatal("a panic left its writes or key")
	}
	if w := do(); w.Code != http.StatusOK || w.Body.String() != "ok" {
		t.Fatalf("third: %d %s", w.Code, w.Body)
	}
	if w := do(); w.Body.String() != "ok" || runs.Load() != 3 || count(t, db, `SELECT count(*) FROM effects`) != 1 {
		t.Fatalf("replay: %s, %d runs", w.Body, runs.Load())
	}
}

// TestMiddlewareOptions: another header name and methods, a fingerprint
// that ignores the body, and more headers kept for replays.
func TestMiddlewareOptions(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	s := newServer(t, db, true,
		idem.WithHeader("x-request-key"), idem.WithMethods(http.MethodPut),
		idem.WithFingerprint(func(r *http.Request, _ []byte) []byte { return []byte(r.URL.Path) }),
		idem.WithReplayHeaders("Location", "X-Not-Kept"))
	send := func(method, body string) response {
		req, _ := http.NewRequest(method, s.URL+"/charges", strings.NewReader(body))
		req.Header.Set("X-Request-Key", "k")
		res, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return response{res.StatusCode, res.Header, string(b)}
	}
	first := send(http.MethodPut, "a")
	again := send(http.MethodPut, "b") // same fingerprint: the body is not part of it
	if first.status != http.StatusCreated || again.body != first.body || again.header.Get("X-Not-Kept") != "1" ||
		again.header.Get("Content-Type") == "application/json" || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	if r := send(http.MethodPost, "c"); r.header.Get("Idempotent-Replayed") != "" || s.runs.Load() != 2 {
		t.Fatalf("POST is not among the methods: %+v, %d runs", r, s.runs.Load())
	}
}

// TestMiddlewareConcurrentReplaysAreNot409: in the default (409) mode,
// requests replaying a recorded key at the same time all get the replay —
// a replay takes no lock another replay could find taken.
func TestMiddlewareConcurrentReplaysAreNot409(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	s := newServer(t, db, false)
	first := s.post(t, "alice", "k", "x")
	res := make([]response, 32)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i] = s.post(t, "alice", "k", "x")
		}()
	}
	close(start)
	wg.Wait()
	for i, r := range res {
		if r.status != first.status || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay %d: %d %s", i, r.status, r.body)
		}
	}
}

// TestMiddlewareConcurrentIdenticalRequestsIn409Mode: 64 identical
// requests at once in the default mode: the handler runs once; every other
// request gets 409 (the first still running) or the replay, byte for byte.
func TestMiddlewareConcurrentIdenticalRequestsIn409Mode(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	s := newServer(t, db, false)
	res := make([]response, 64)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i] = s.post(t, "alice", "k", "x")
		}()
	}
	close(start)
	wg.Wait()
	var first *response
	conflicts, replays := 0, 0
	for i := range res {
		switch {
		case res[i].status == http.StatusConflict:
			conflicts++
		case res[i].header.Get("Idempotent-Replayed") == "true":
			replays++
		case first == nil:
			first = &res[i]
		default:
			t.Fatal("two first responses")
		}
	}
	if first == nil || s.runs.Load() != 1 || count(t, db, `SELECT count(*) FROM effects`) != 1 {
		t.Fatalf("first %v, %d runs", first, s.runs.Load())
	}
	for _, r := range res {
		if r.status != http.StatusConflict && (r.status != first.status || r.body != first.body) {
			t.Fatalf("response %+v differs from the first %+v", r, *first)
		}
	}
	t.Logf("1 execution, %d replays, %d conflicts", replays, conflicts)
}

// serveBehind serves h behind the middleware on db's pgx pool, every
// request in one scope.
func serveBehind(t *testing.T, db *pgtest.DB, h http.Handler, opts ...idem.Option) *server {
	t.Helper()
	mw, err := idem.Middleware(db.Pool(), append([]idem.Option{idem.WithScope(func(*http.Request) string { return "" })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{Server: httptest.NewServer(mw(h))}
	t.Cleanup(s.Close)
	return s
}

// TestMiddlewareReplaysTheDefaultHeaders: every header of the default
// replay list, set by the handler the way net/http code sets it
// (Header().Set, which stores "ETag" as "Etag"), comes back on the
// replay.
func TestMiddlewareReplaysTheDefaultHeaders(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	headers := map[string]string{
		"Content-Type":     "application/json",
		"Content-Encoding": "identity",
		"Content-Language": "en",
		"Location":         "/charges/1",
		"ETag":             `"v1"`,
		"Last-Modified":    "Wed, 02 Dec 2026 07:00:00 GMT",
	}
	s := serveBehind(t, db, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":1}`)
	}))
	first := s.post(t, "", "k", "x")
	replay := s.post(t, "", "k", "x")
	if replay.header.Get("Idempotent-Replayed") != "true" || replay.status != first.status || replay.body != first.body {
		t.Fatalf("replay %+v of %+v", replay, first)
	}
	for k, v := range headers {
		if got := replay.header.Get(k); got != v {
			t.Errorf("replayed %s = %q, want %q", k, got, v)
		}
	}
}

// TestMiddlewareInformationalResponsesPassThrough: a handler that sends
// 103 Early Hints and then 201 with a body: the client gets the 103 (with
// its Link header) and then the 201 and its body, through a real HTTP
// server; the replay is the 201 and its body, and no 103 — an
// informational response is passed through, never recorded as the result.
func TestMiddlewareInformationalResponsesPassThrough(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	const link = "</style.css>; rel=preload; as=style"
	s := serveBehind(t, db, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", link)
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "created")
	}))
	type hint struct {
		code int
		link string
	}
	send := func() (response, []hint) {
		var hints []hint
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hints = append(hints, hint{code, h.Get("Link")})
			return nil
		}}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, s.URL, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "k")
		res, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return response{res.StatusCode, res.Header, string(b)}, hints
	}
	first, hints := send()
	if first.status != http.StatusCreated || first.body != "created" {
		t.Fatalf("first answer %d %q, want 201 created", first.status, first.body)
	}
	if len(hints) != 1 || hints[0] != (hint{http.StatusEarlyHints, link}) {
		t.Fatalf("first answer's informational responses %+v, want one 103 with the Link", hints)
	}
	replay, hints := send()
	if replay.status != http.StatusCreated || replay.body != "created" || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay %d %q %v, want the 201 replayed", replay.status, replay.body, replay.header)
	}
	if len(hints) != 0 {
		t.Fatalf("the replay sent informational responses %+v", hints)
	}
}

// TestMiddlewareFingerprintIncludesTheQuery: POST /transfer?amount=10 and
// ?amount=1000 under one key are two requests (422), not a replay of the
// first; the same query again replays. A request without a query keeps
// the fingerprint it always had (SHA-256 of method, NUL, path, NUL, body),
// so keys recorded before the query counted still match their retries.
func TestMiddlewareFingerprintIncludesTheQuery(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	s := newServer(t, db, false)
	send := func(target, key string) response {
		req, err := http.NewRequest(http.MethodPost, s.URL+target, strings.NewReader("transfer"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		res, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return response{res.StatusCode, res.Header, string(b)}
	}
	first := send("/transfer?amount=10", "k")
	if first.status != http.StatusCreated {
		t.Fatalf("first: %+v", first)
	}
	if r := send("/transfer?amount=1000", "k"); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("another amount under the same key: %d %s, want 422", r.status, r.body)
	}
	if r := send("/transfer?amount=10", "k"); r.status != first.status || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same query again: %+v, want the replay of %+v", r, first)
	}
	if r := send("/transfer", "k"); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("no query under the key of ?amount=10: %d, want 422", r.status)
	}
	if s.runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", s.runs.Load())
	}
	if r := send("/transfer", "plain"); r.status != http.StatusCreated {
		t.Fatalf("without a query: %+v", r)
	}
	var fp []byte
	if err := db.Pool().QueryRow(context.Background(), `SELECT fingerprint FROM sqlock_idem WHERE key = 'plain'`).Scan(&fp); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256([]byte("POST\x00/transfer\x00transfer")); !bytes.Equal(fp, want[:]) {
		t.Fatalf("a query-less request's fingerprint changed: %x, want %x", fp, want)
	}
}

// TestMiddlewareRefusesMethodsNoRequestHas: WithMethods("post") would
// never match a POST (methods are case-sensitive) and leave idempotency
// silently off: it is refused, as are an empty method and one that is not
// an HTTP token; upper-case and extension methods are taken.
func TestMiddlewareRefusesMethodsNoRequestHas(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	scope := idem.WithScope(func(*http.Request) string { return "" })
	for _, m := range []string{"post", "Post", "", "PO ST", "POST\n", "PÖST"} {
		if _, err := idem.Middleware(db.Pool(), scope, idem.WithMethods(http.MethodPut, m)); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Errorf("WithMethods(%q): %v, want ErrInvalidOption", m, err)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodDelete, "PROPPATCH", "X-CHARGE"} {
		if _, err := idem.Middleware(db.Pool(), scope, idem.WithMethods(m)); err != nil {
			t.Errorf("WithMethods(%q): %v", m, err)
		}
	}
}
