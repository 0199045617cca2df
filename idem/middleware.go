package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/lockedtx"
)

// Middleware returns net/http middleware that makes POST and PATCH
// requests (see [WithMethods]) idempotent after the IETF httpapi
// Idempotency-Key draft:
//
//   - a request without the Idempotency-Key header ([WithHeader]) is
//     answered 400 (unless [WithOptionalKey]); a malformed key — not a
//     string of 1 to [MaxKeyBytes] printable ASCII characters, quoted as a
//     structured-field string or bare — is answered 400 too;
//   - the first request with a key runs the handler inside a transaction
//     the middleware begins on db; the handler's writes join it through
//     [TxFrom](r.Context()). The response is buffered; if its status is
//     below 500 it is stored with the key (status, the headers of
//     [WithReplayHeaders], body) and the transaction committed before the
//     response is sent — a client never sees a response whose effects did
//     not commit. A 5xx response, a panic or a failed commit rolls
//     everything back: the key stays free and a retry runs the handler
//     again. A failed commit is answered 503, saying whether the effects
//     did not commit or the outcome is unknown (the connection lost with
//     COMMIT in flight: a retry replays or runs again). Informational responses (1xx but 101: 103 Early Hints) are
//     sent to the client at once and never recorded;
//   - a later request with the same key and the same fingerprint
//     ([WithFingerprint]: method, path, query and body by default) gets the stored
//     response again, byte for byte, with "Idempotent-Replayed: true";
//     with a different fingerprint it is answered 422 and nothing runs;
//   - while the first request is in progress, another with its key is
//     answered 409 at once, or waits for it and replays ([WithWait]).
//
// Keys are per scope ([WithScope], required: the authenticated principal)
// and are kept for [WithRetention]; run [Sweep] periodically to delete old
// ones.
//
// On a *pgxpool.Pool, and on a *sql.DB opened with txlock.OpenDB, the
// claim travels with BEGIN and the stored response with COMMIT, as in
// [DoTx]: the middleware adds no round trip to the handler's transaction,
// and a replay is one round trip.
//
// The trade-off of the transaction form: the handler holds a connection
// and a transaction for its whole run, and only its writes in that
// transaction are undone with the key. For calls to other services, pass
// the key on to them.
//
// A bad or missing option is an error matching [sqlock.ErrInvalidOption];
// a nil db one matching [sqlock.ErrNilHandle].
func Middleware[DB Handle](db DB, opts ...Option) (func(http.Handler) http.Handler, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.scope == nil {
		return nil, invalid("Middleware needs WithScope: the request's principal, so that one client's key never replays another's response")
	}
	m := &middleware{cfg: c, st: buildStatements(c.table), open: opener(db)}
	if m.open == nil {
		return nil, errkind.New(sqlock.ErrNilHandle, "idem: nil database handle")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

type txKey struct{}

// TxFrom returns the transaction [Middleware] runs the handler in, from
// the request's context: a *sql.Tx when the middleware was given a
// *sql.DB, a pgx.Tx when it was given a *pgxpool.Pool (sqlx:
// &sqlx.Tx{Tx: tx, Mapper: db.Mapper}; GORM: db.Session with
// ConnPool: tx). ok is false outside the middleware or for the other type.
// The handler must neither commit nor roll it back.
func TxFrom[T any](ctx context.Context) (tx T, ok bool) {
	tx, ok = ctx.Value(txKey{}).(T)
	return tx, ok
}

type middleware struct {
	cfg  config
	st   statements
	open openFunc
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.cfg.appliesTo(r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(m.cfg.header)
	if len(values) == 0 {
		if m.cfg.optional {
			next.ServeHTTP(w, r)
			return
		}
		problem(w, http.StatusBadRequest, "missing "+m.cfg.header+" header")
		return
	}
	key, ok := parseKey(values)
	if !ok {
		problem(w, http.StatusBadRequest, "malformed "+m.cfg.header+" header: want one string of 1 to 255 printable ASCII characters")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.cfg.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			problem(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		problem(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	k := keyOf{scope: m.cfg.scope(r), key: key, fingerprint: m.cfg.finger(r, body)}
	if err := k.check(); err != nil {
		problem(w, http.StatusInternalServerError, "idempotency scope: "+err.Error())
		return
	}
	m.execute(w, r, next, k)
}

func (m *middleware) execute(w http.ResponseWriter, r *http.Request, next http.Handler, k keyOf) {
	ctx := r.Context()
	o, cl, err := openClaimed(ctx, m.open, m.st, &m.cfg, k, !m.cfg.wait)
	switch {
	case errors.Is(err, errBusy):
		problem(w, http.StatusConflict, "a request with this idempotency key is still in progress")
		return
	case errors.Is(err, ErrKeyReused):
		problem(w, http.StatusUnprocessableEntity, "idempotency key reused with a different request")
		return
	case errors.Is(err, ErrPhased):
		problem(w, http.StatusUnprocessableEntity, "idempotency key in use by a request of another kind (RunPhases)")
		return
	case err != nil:
		problem(w, http.StatusServiceUnavailable, "idempotency store unavailable")
		return
	case cl.replay:
		var s stored
		if err := json.Unmarshal(cl.result, &s); err != nil {
			problem(w, http.StatusInternalServerError, "stored response unreadable")
			return
		}
		s.writeTo(w, true)
		return
	}
	ended := false
	defer func() {
		if !ended {
			_ = o.end(ctx, false, "") // also when the handler panics
		}
	}()
	rec := &recorder{w: w, header: http.Header{}}
	next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, txKey{}, o.tx)))
	s := rec.stored(m.cfg.keep)
	if s.Status >= 500 {
		rec.writeTo(w) // rolled back by the deferred end
		return
	}
	data, err := json.Marshal(s)
	if err == nil {
		ended = true
		// The response is stored in COMMIT's round trip where the
		// connection allows: if storing fails, nothing commits.
		err = o.end(ctx, true, m.st.store, k.scope, k.key, data)
	}
	switch {
	case errors.Is(err, lockedtx.ErrAmbiguousCommit):
		problem(w, http.StatusServiceUnavailable, "the outcome of the request is unknown: the connection to the database was lost while it committed; "+
			"retry with the same key — it is replayed if it committed, run again if it did not")
		return
	case err != nil:
		problem(w, http.StatusServiceUnavailable, "the request's effects did not commit; retry with the same key")
		return
	}
	rec.writeTo(w)
}

// parseKey reads the key from the header's values: exactly one, an sf-string
// ("…" with \" and \\ escapes) or, leniently, a bare token, of 1 to
// MaxKeyBytes printable ASCII characters.
func parseKey(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	v := strings.TrimSpace(values[0])
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		for i := 1; i < len(v)-1; i++ {
			ch := v[i]
			if ch == '\\' {
				i++
				if i == len(v)-1 || (v[i] != '"' && v[i] != '\\') {
					return "", false
				}
				ch = v[i]
			} else if ch == '"' {
				return "", false
			}
			b.WriteByte(ch)
		}
		v = b.String()
	} else if strings.ContainsAny(v, "\" ,") {
		return "", false
	}
	if len(v) < 1 || len(v) > MaxKeyBytes {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", false
		}
	}
	return v, true
}

// defaultFingerprint is SHA-256 of the method, the path, the query string
// byte for byte (?amount=10 and ?amount=1000 are two requests) and the
// body. A request without a query hashes the bytes it always did, so that
// keys recorded before the query counted still match their retries; one
// with a query hashes a form that starts with a NUL byte, which no method
// starts with, so that the two forms never collide.
func defaultFingerprint(r *http.Request, body []byte) []byte {
	h := sha256.New()
	if r.URL.RawQuery == "" {
		fmt.Fprintf(h, "%s\x00%s\x00", r.Method, r.URL.Path)
	} else {
		fmt.Fprintf(h, "\x00%s\x00%s\x00%s\x00", r.Method, r.URL.Path, r.URL.RawQuery)
	}
	h.Write(body)
	return h.Sum(nil)
}

// problem answers with an RFC 9457 problem document, as the draft's
// examples do.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
}

// stored is a response as kept with its key.
type stored struct {
	Status int         `json:"s"`
	Header http.Header `json:"h,omitempty"`
	Body   []byte      `json:"b"`
}

func (s stored) writeTo(w http.ResponseWriter, replayed bool) {
	for k, v := range s.Header {
		w.Header()[k] = v
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(s.Status)
	_, _ = w.Write(s.Body)
}

// recorder buffers the handler's response until the transaction's outcome
// is known. Informational responses (1xx but 101) are not buffered: they
// go to the client at once, through w, and are never the recorded status.
type recorder struct {
	w      http.ResponseWriter
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	switch {
	case r.status != 0: // net/http ignores a status after the final one too
	case informational(status):
		// Sent with the headers set so far, as net/http sends them (and
		// they stay set for the final response, as there).
		maps.Copy(r.w.Header(), r.header)
		r.w.WriteHeader(status)
	default:
		r.status = status
	}
}

// informational reports whether status is an interim response that
// net/http sends ahead of the final one (103 Early Hints, 100 Continue): 1xx
// except 101 Switching Protocols, which net/http treats as final.
func informational(status int) bool {
	return status >= 100 && status < 200 && status != http.StatusSwitchingProtocols
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

func (r *recorder) stored(keep []string) stored {
	s := stored{Status: r.status, Body: r.body.Bytes()}
	if s.Status == 0 {
		s.Status = http.StatusOK
	}
	for _, k := range keep {
		if v, ok := r.header[k]; ok {
			if s.Header == nil {
				s.Header = http.Header{}
			}
			s.Header[k] = v
		}
	}
	return s
}

// writeTo sends the first response as the handler wrote it (all its
// headers, not only those kept for replays).
func (r *recorder) writeTo(w http.ResponseWriter) {
	maps.Copy(w.Header(), r.header)
	s := r.stored(nil)
	w.WriteHeader(s.Status)
	_, _ = w.Write(s.Body)
}
