package httpver

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

// maxKindLen bounds a kind's name, which every ETag of the kind carries.
const maxKindLen = 64

// Kind makes and reads the ETags of one kind of versioned resource (one
// table, one URL collection). Make one per kind with [NewKind] and share
// it: it is immutable and safe for concurrent use.
//
// Its ETags are strong and have the form
//
//	"<kind>:<id in unpadded base64url>:v<version>"
//
// ("order:NDI:v7" for order "42" at version 7). The encoding is
// injective — the kind has no ':', base64url has none, the version is
// canonical decimal — so two resources, or two versions of one, never
// share a tag, and a tag of another resource never matches this one's.
// It carries only what the client already has (the resource's id, which
// is in its URL, and a version counter); the kind is the name you choose,
// so choose one you would show a client ("order", not a schema-qualified
// table name). A tag is not a secret and needs none: a forged tag only
// asks for a write at some version, which the database checks.
type Kind struct {
	name    string
	current CurrentFunc
}

// CurrentFunc reads the version a resource's row has now. It returns an
// error matching [ErrNotFound] (or [database/sql.ErrNoRows]) when no row has
// the id. [Kind.Update] calls it only on the losing path — a write that
// went stale without saying the row's version (no probe), an If-Match that
// names none of the resource's versions, or If-Match: * — never before a
// write.
type CurrentFunc func(ctx context.Context, id string) (version int64, err error)

// Option configures a [Kind].
type Option func(*Kind)

// WithCurrent sets how the kind reads a row's current version (see
// [CurrentFunc]). Without it a 412 carries the current ETag only when the
// write's *versioned.StaleError was probed (versioned.WithProbe,
// gormplugin.WithProbe), and If-Match: * cannot be served.
func WithCurrent(f CurrentFunc) Option { return func(k *Kind) { k.current = f } }

// NewKind returns the Kind named name: 1 to 64 ASCII letters, digits, '_',
// '-' or '.'. Any other name is an error matching
// [sqlock.ErrInvalidArgument].
func NewKind(name string, opts ...Option) (*Kind, error) {
	if name == "" || len(name) > maxKindLen {
		return nil, errkind.New(sqlock.ErrInvalidArgument, "httpver: a kind's name has 1 to 64 characters, got %d", len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return nil, errkind.New(sqlock.ErrInvalidArgument, "httpver: a kind's name is letters, digits, '_', '-' and '.', got %q", name)
		}
	}
	k := &Kind{name: name}
	for _, o := range opts {
		if o != nil {
			o(k)
		}
	}
	return k, nil
}

// MustKind is [NewKind] for names known at compile time: it panics on an
// invalid name.
func MustKind(name string, opts ...Option) *Kind {
	k, err := NewKind(name, opts...)
	if err != nil {
		panic(err)
	}
	return k
}

// Name returns the kind's name.
func (k *Kind) Name() string { return k.name }

// ETag returns the strong entity-tag of resource id at version, quoted, as
// it goes in the ETag header.
func (k *Kind) ETag(id string, version int64) string {
	return `"` + k.opaque(id, version) + `"`
}

func (k *Kind) opaque(id string, version int64) string {
	b := make([]byte, 0, len(k.name)+base64.RawURLEncoding.EncodedLen(len(id))+24)
	b = append(b, k.name...)
	b = append(b, ':')
	b = base64.RawURLEncoding.AppendEncode(b, []byte(id))
	b = append(b, ":v"...)
	b = strconv.AppendInt(b, version, 10)
	return string(b)
}

// versionOf returns the version a strong tag names for resource id, and
// false for a weak tag, a tag of another kind or resource, or one this
// package did not make. Strong comparison (RFC 9110 §8.8.3.2): a weak tag
// never matches.
func (k *Kind) versionOf(t EntityTag, id string) (int64, bool) {
	if t.Weak {
		return 0, false
	}
	i := strings.LastIndex(t.Opaque, ":v")
	if i < 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(t.Opaque[i+2:], 10, 64)
	if err != nil {
		return 0, false
	}
	// Formatting the parsed version back and comparing the whole tag
	// refuses every non-canonical spelling (v07, v+7) and checks kind and
	// id in one comparison.
	if k.opaque(id, v) != t.Opaque {
		return 0, false
	}
	return v, true
}
