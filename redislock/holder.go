package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock/internal/errkind"
)

// The bounds of what a lock carries (as a lease's): a label an operator
// reads, and a payload small enough to be copied with every grant.
const (
	MaxHolderLen  = 256
	MaxPayloadLen = 4096
)

// info is WithHolder and WithPayload: what a Locker's locks carry.
type info struct {
	set     bool
	label   string
	payload []byte
}

// WithHolder labels every lock of the Locker with who holds it — a host, a
// pid, a job id — which [Locker.Holder] reads back. It is stored beside the
// lock's key, in the same script that takes it (a hash at a key no lock key
// can be, with the lock's expiry), and goes with it. It is UTF-8 text
// without NUL bytes of at most [MaxHolderLen] bytes, as a lease's label:
// otherwise an error matching [ErrInvalid]
// and [sqlock.ErrInvalidArgument], reported by every method, and nothing
// is sent.
func WithHolder(label string) Option {
	return func(c *config) error {
		switch {
		case len(label) > MaxHolderLen:
			return errkind.New(ErrInvalid, "redislock: holder label of %d bytes is longer than %d", len(label), MaxHolderLen)
		case !utf8.ValidString(label) || strings.IndexByte(label, 0) >= 0:
			return errkind.New(ErrInvalid, "redislock: holder label is not UTF-8 text without NUL bytes")
		}
		c.info.set, c.info.label = true, label
		return nil
	}
}

// WithPayload stores p with every lock of the Locker, as WithHolder stores
// its label: at most [MaxPayloadLen] bytes (longer: an error matching
// [ErrInvalid] and [sqlock.ErrInvalidArgument]). It is copied.
func WithPayload(p []byte) Option {
	return func(c *config) error {
		if len(p) > MaxPayloadLen {
			return errkind.New(ErrInvalid, "redislock: payload of %d bytes is longer than %d", len(p), MaxPayloadLen)
		}
		c.info.set, c.info.payload = true, append([]byte(nil), p...)
		return nil
	}
}

// holderPrefix begins the key of the hash that holds a lock's label and
// payload (see FenceKey: a NUL byte, the lock key's hash slot).
const holderPrefix = "\x00holder"

// holderKey is the key of key's label and payload.
func holderKey(key string) string { return auxKey(holderPrefix, key) }

// Holder is who holds a lock, as [Locker.Holder] read it.
type Holder struct {
	// Owner is the holder's random owner id (the value of the lock's key).
	Owner string
	// Label and Payload are what the holder's Locker stored (WithHolder,
	// WithPayload); empty if it stored none.
	Label   string
	Payload []byte
	// Token is the holder's fencing token: the last one minted for the
	// key, which only a grant mints.
	Token int64
	// TTL is how long the key has left on the server, until a renewal.
	TTL time.Duration
}

// holderScript reads a lock: {} if free, else {owner, pttl, token, label,
// payload}, the last two only if stored by this owner.
var holderScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return {} end
local out = {v, tostring(redis.call('PTTL', KEYS[1])), redis.call('GET', KEYS[2]) or '0'}
local h = redis.call('HMGET', KEYS[3], 'owner', 'label', 'payload')
if h[1] == v then
  out[4], out[5] = h[2] or '', h[3] or ''
end
return out`)

// Holder reads who holds the lock called key, in one script: held is false
// if no one does. It reads; it takes nothing. A key that fails the input
// check is an error matching [ErrInvalid].
func (lk *Locker) Holder(ctx context.Context, key string) (h Holder, held bool, err error) {
	if lk == nil {
		return Holder{}, false, kit.NilHandle("holder", key, "Locker")
	}
	if err := lk.base.Err(); err != nil {
		return Holder{}, false, err
	}
	if _, err := check(key, MinTTL); err != nil {
		return Holder{}, false, &Error{Op: "holder", Key: key, Err: ErrInvalid, Cause: err}
	}
	res, err := holderScript.Run(ctx, lk.c, []string{key, FenceKey(key), holderKey(key)}).StringSlice()
	if err != nil {
		return Holder{}, false, &Error{Op: "holder", Key: key, Cause: err}
	}
	if len(res) < 3 {
		return Holder{}, false, nil
	}
	h.Owner = res[0]
	ms, err1 := strconv.ParseInt(res[1], 10, 64)
	tok, err2 := strconv.ParseInt(res[2], 10, 64)
	if err1 != nil || err2 != nil {
		return Holder{}, false, &Error{Op: "holder", Key: key, Cause: fmt.Errorf("unexpected reply %q", res)}
	}
	h.TTL, h.Token = time.Duration(ms)*time.Millisecond, tok
	if len(res) == 5 {
		h.Label = res[3]
		if res[4] != "" {
			h.Payload = []byte(res[4])
		}
	}
	return h, true, nil
}
