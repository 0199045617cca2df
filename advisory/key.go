package advisory

import (
	"strconv"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/hash"
	"github.com/sqlock/sqlock/internal/errkind"
)

// ErrInvalidKey is returned for the zero Key, or one made from an empty
// string: a lock on "" almost always means a missing value, not a resource.
// It matches [sqlock.ErrInvalidArgument] too.
var ErrInvalidKey = errkind.New(sqlock.ErrInvalidArgument, "advisory: invalid lock key (zero Key or empty string)")

type keyKind uint8

const (
	kindInvalid keyKind = iota
	kindInt64           // pg_advisory_lock(bigint): pg_locks objsubid 1
	kindPair            // pg_advisory_lock(int, int): pg_locks objsubid 2
)

// Key names an advisory lock. PostgreSQL has two key spaces that never
// collide: one bigint, and a pair of int4. The zero Key is invalid, and every
// function taking a Key returns ErrInvalidKey for it.
//
// A Key is a value: it reaches the server as a bind parameter or as an
// integer literal this package formats itself, never as caller text. A key
// made from text (KeyOf, KeyText) keeps the text, for String and so for
// errors and logs; it is compared as the lock it names by Compare, while ==
// also compares the text.
type Key struct {
	kind     keyKind
	hashtext bool   // text was hashed by KeyText
	v        int64  // the bigint key, or a<<32 | uint32(b) for a pair
	text     string // what KeyOf or KeyText hashed; "" otherwise
}

// KeyOf hashes s to a 64-bit key: hash.TextExtended(s, 0), the value SQL's
// hashtextextended(s, 0) gives, so pg_advisory_lock(hashtextextended(s, 0))
// in SQL takes the same lock. This is the default: 32-bit keys collide
// (1% odds at about 9,300 distinct keys; 64-bit: 6×10⁸).
func KeyOf(s string) Key {
	if s == "" {
		return Key{}
	}
	return Key{kind: kindInt64, v: hash.TextExtended(s, 0), text: s}
}

// KeyText hashes s to the 32-bit key that SQL's pg_advisory_lock(hashtext(s))
// takes (sign-extended to bigint, as SQL does), for compatibility with
// existing SQL. Prefer KeyOf for new code.
func KeyText(s string) Key {
	if s == "" {
		return Key{}
	}
	return Key{kind: kindInt64, hashtext: true, v: int64(hash.Text(s)), text: s}
}

// KeyInt is the bigint key n, as in pg_advisory_lock(n).
func KeyInt(n int64) Key { return Key{kind: kindInt64, v: n} }

// KeyPair is the two-int4 key (a, b), as in pg_advisory_lock(a, b). It is a
// separate key space from the bigint keys: KeyPair(0, 1) and KeyInt(1) are
// different locks.
func KeyPair(a, b int32) Key {
	return Key{kind: kindPair, v: int64(a)<<32 | int64(uint32(b))}
}

// Valid reports whether k names a lock.
func (k Key) Valid() bool { return k.kind != kindInvalid }

// IsPair reports whether k is in the two-int4 key space.
func (k Key) IsPair() bool { return k.kind == kindPair }

// Int64 returns the bigint key; ok is false for pairs and the zero Key.
func (k Key) Int64() (n int64, ok bool) { return k.v, k.kind == kindInt64 }

// Name returns the text k was made from by [KeyOf] or [KeyText], and ""
// for other keys: observers, traces and [WithKeyNames] show it beside the
// number.
func (k Key) Name() string { return k.text }

// Pair returns the two int4 halves; ok is false unless k is a pair.
func (k Key) Pair() (a, b int32, ok bool) {
	return int32(k.v >> 32), int32(uint32(k.v)), k.kind == kindPair
}

// Locktag returns the columns pg_locks shows for this lock (locktype
// 'advisory'): classid and objid hold the high and low 32 bits, objsubid is
// 1 for bigint keys and 2 for pairs.
func (k Key) Locktag() (classid, objid uint32, objsubid int16) {
	switch k.kind {
	case kindInt64:
		return uint32(uint64(k.v) >> 32), uint32(k.v), 1
	case kindPair:
		return uint32(uint64(k.v) >> 32), uint32(k.v), 2
	}
	return 0, 0, 0
}

// Compare orders keys canonically (bigint keys before pairs, then by value);
// locking several keys in this order on every path avoids deadlocks.
func (k Key) Compare(o Key) int {
	switch {
	case k.kind != o.kind:
		if k.kind < o.kind {
			return -1
		}
		return 1
	case k.v < o.v:
		return -1
	case k.v > o.v:
		return 1
	}
	return 0
}

// AppendArgs appends the argument list of an advisory-lock function call
// for k as integer literals: "n" for a bigint key, "a,b" for a pair. It is
// for building statements such as "SELECT pg_advisory_xact_lock(" + args +
// ")" without a bind parameter (pgx's BeginQuery); the text is produced by
// strconv alone, never from caller input.
func (k Key) AppendArgs(dst []byte) []byte {
	if k.kind == kindPair {
		a, b, _ := k.Pair()
		dst = strconv.AppendInt(dst, int64(a), 10)
		dst = append(dst, ',')
		return strconv.AppendInt(dst, int64(b), 10)
	}
	return strconv.AppendInt(dst, k.v, 10)
}

// String describes the key for logs and errors: the number pg_locks shows,
// named by the text it was made from, if any ("advisory key
// \"payment:order-123\" (5806998960378369008)").
func (k Key) String() string {
	switch {
	case k.kind == kindPair:
		return "advisory key (" + string(k.AppendArgs(nil)) + ")"
	case k.kind == kindInt64 && k.text == "":
		return "advisory key " + strconv.FormatInt(k.v, 10)
	case k.kind == kindInt64:
		b := make([]byte, 0, len(`advisory key "" (hashtext -9223372036854775808)`)+len(k.text))
		b = append(b, "advisory key "...)
		b = strconv.AppendQuote(b, k.text)
		b = append(b, " ("...)
		if k.hashtext {
			b = append(b, "hashtext "...)
		}
		b = strconv.AppendInt(b, k.v, 10)
		return string(append(b, ')'))
	}
	return "invalid advisory key"
}
