package idem

import (
	"net/http"
	"strings"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/lease"
)

// DefaultTable is the table keys live in unless [WithTable] says otherwise.
const DefaultTable = "sqlock_idem"

// DefaultRetention is how long a key is kept (and replayed) unless
// [WithRetention] says otherwise: the IETF draft suggests at least 24 hours.
const DefaultRetention = 24 * time.Hour

// MaxSweepBatch is the largest batch [Sweep] deletes in one statement.
const MaxSweepBatch = 1000

type config struct {
	table     tableName
	retention time.Duration
	codec     Codec
	batch     int
	leaseTTL  time.Duration
	onBatch   func(deleted int64, took time.Duration) // tests: each sweep statement's server time

	// Middleware only.
	header   string
	methods  map[string]bool // nil: POST and PATCH
	optional bool
	wait     bool
	maxBody  int64
	scope    func(*http.Request) string // nil: not given (Middleware refuses)
	finger   func(r *http.Request, body []byte) []byte
	keep     []string
}

func buildConfig(opts []Option) (config, error) {
	c := config{
		table:     tableName{Name: DefaultTable},
		retention: DefaultRetention,
		codec:     JSON{},
		batch:     MaxSweepBatch,
		leaseTTL:  DefaultLeaseTTL,
		header:    "Idempotency-Key",
		maxBody:   1 << 20,
		finger:    defaultFingerprint,
		keep:      defaultReplayHeaders,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Option configures [Do], [Migrate], [DDL], [Sweep] and [Middleware]. Each
// says which of them it applies to; the others ignore it, so one list of
// options can be shared by all of them.
type Option func(*config) error

func invalid(format string, args ...any) error {
	return errkind.New(sqlock.ErrInvalidOption, "idem: "+format, args...)
}

// WithTable names the keys table (all): an identifier, optionally qualified
// by a schema ("app.idem_keys"), of letters, digits and underscores, the
// table at most 52 bytes (its index is <table>_expires_at) and the schema
// 63. It is quoted as given. The default is [DefaultTable]. A bad name
// matches [sqlock.ErrInvalidOption] and [sqlock.ErrInvalidArgument].
func WithTable(name string) Option {
	return func(c *config) error {
		t, err := parseTable(name)
		if err != nil {
			return err
		}
		c.table = t
		return nil
	}
}

// WithRetention sets how long a recorded key is replayed ([Do],
// [Middleware]); after that it counts as new and [Sweep] deletes it. It
// must be positive. The default is [DefaultRetention].
func WithRetention(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("retention %v must be positive", d)
		}
		c.retention = d
		return nil
	}
}

// WithCodec sets how [Do] stores and replays its results (default [JSON]).
// A nil codec is refused.
func WithCodec(codec Codec) Option {
	return func(c *config) error {
		if codec == nil {
			return invalid("nil codec")
		}
		c.codec = codec
		return nil
	}
}

// WithBatch sets how many expired keys [Sweep] deletes per statement: 1 to
// [MaxSweepBatch] (the default), so that no statement holds many row locks
// for long.
func WithBatch(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxSweepBatch {
			return invalid("sweep batch %d: want 1 to %d", n, MaxSweepBatch)
		}
		c.batch = n
		return nil
	}
}

// WithHeader names the request header that carries the key ([Middleware];
// default "Idempotency-Key").
func WithHeader(name string) Option {
	return func(c *config) error {
		if name == "" {
			return invalid("empty header name")
		}
		c.header = http.CanonicalHeaderKey(name)
		return nil
	}
}

// WithMethods sets the request methods [Middleware] applies to (default
// POST and PATCH); requests with other methods pass through untouched.
// Methods are case-sensitive (RFC 9110) and net/http's are upper case: a
// method with a lower-case letter ("post", which would never match a POST
// and leave idempotency silently off), an empty one or one that is not an
// HTTP token is refused.
func WithMethods(methods ...string) Option {
	return func(c *config) error {
		if len(methods) == 0 {
			return invalid("no methods")
		}
		c.methods = map[string]bool{}
		for _, m := range methods {
			if err := checkMethod(m); err != nil {
				return err
			}
			c.methods[m] = true
		}
		return nil
	}
}

// checkMethod refuses what no request's method can equal as net/http
// compares it: byte for byte, the standard methods upper case.
func checkMethod(m string) error {
	if m == "" || strings.IndexFunc(m, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
		return invalid("method %q: want an HTTP method such as http.MethodPost", m)
	}
	if up := strings.ToUpper(m); up != m {
		return invalid("method %q would never match a request: HTTP methods are case-sensitive and net/http's are upper case; write %q", m, up)
	}
	return nil
}

// isTokenChar reports whether r may appear in an HTTP token (RFC 9110
// tchar), which a method is.
func isTokenChar(r rune) bool {
	return r < 0x7f && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// WithOptionalKey makes [Middleware] pass requests without the header
// through to the handler, with no transaction of its own, instead of
// answering 400 Bad Request.
func WithOptionalKey() Option {
	return func(c *config) error { c.optional = true; return nil }
}

// WithWait makes a request whose key is in use by a request still in
// progress wait for it (bounded by the request's context) and then replay
// its response, instead of answering 409 Conflict at once ([Middleware]).
func WithWait() Option {
	return func(c *config) error { c.wait = true; return nil }
}

// WithMaxBody bounds the request body [Middleware] reads to fingerprint it
// (default 1 MiB); a longer body is answered 413. It must be positive.
func WithMaxBody(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return invalid("max body %d must be positive", n)
		}
		c.maxBody = n
		return nil
	}
}

// WithScope sets the function that gives a request's scope ([Middleware]):
// the authenticated principal (tenant, user, API key), so that the same key
// from two principals is two keys. [Middleware] requires it: with one scope
// for everybody, a client that sends another's key and request would be
// replayed the other's response. A service with a single client says so
// with a function returning "". The scope is at most 255 bytes; a longer
// one is answered 500.
func WithScope(scope func(r *http.Request) string) Option {
	return func(c *config) error {
		if scope == nil {
			return invalid("nil scope function")
		}
		c.scope = scope
		return nil
	}
}

// WithFingerprint sets how [Middleware] fingerprints a request: a reused
// key with a different fingerprint is answered 422. body is the whole
// request body (also readable again from r.Body). The default is SHA-256 of
// the method, the path, the query string (byte for byte: a request that
// differs only in its query, ?amount=10 against ?amount=1000, is another
// request, answered 422 under the same key) and the body.
func WithFingerprint(f func(r *http.Request, body []byte) []byte) Option {
	return func(c *config) error {
		if f == nil {
			return invalid("nil fingerprint function")
		}
		c.finger = f
		return nil
	}
}

// WithReplayHeaders names the response headers [Middleware] stores and
// replays with the status and body (default Content-Type,
// Content-Encoding, Content-Language, Location, ETag, Last-Modified).
// Names are matched as net/http stores them, in canonical form: "etag"
// and "ETag" both name the header http.Header.Set("ETag", …) keeps as
// "Etag".
func WithReplayHeaders(names ...string) Option {
	return func(c *config) error {
		c.keep = canonicalHeaders(names)
		return nil
	}
}

// defaultReplayHeaders are the headers replayed unless [WithReplayHeaders]
// says otherwise, written as their RFCs spell them ("ETag", which net/http
// keeps as "Etag") and canonicalised by the same rule as the option's
// arguments. (Computed at init and never written again: no mutable state;
// WithReplayHeaders replaces the slice, never changes it.)
var defaultReplayHeaders = canonicalHeaders([]string{"Content-Type", "Content-Encoding", "Content-Language", "Location", "ETag", "Last-Modified"})

// canonicalHeaders is names in net/http's canonical form, the keys of an
// http.Header: the one place the default list and WithReplayHeaders'
// arguments become the keys the recorder looks up.
func canonicalHeaders(names []string) []string {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = http.CanonicalHeaderKey(n)
	}
	return keys
}

// WithLeaseTTL sets the lease a [RunPhases] attempt holds on its key
// (default [DefaultLeaseTTL]): after a crash, the key is free again this
// long after the last renewal, and an attempt waits at least this long for
// a key another holds. Give every attempt on a key the same TTL. It must be
// at least [lease.MinTTL].
func WithLeaseTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < lease.MinTTL {
			return invalid("lease TTL %v: want at least %v", d, lease.MinTTL)
		}
		c.leaseTTL = d
		return nil
	}
}

// appliesTo reports whether [Middleware] handles requests with method.
func (c *config) appliesTo(method string) bool {
	if c.methods == nil {
		return method == http.MethodPost || method == http.MethodPatch
	}
	return c.methods[method]
}
