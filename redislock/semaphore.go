package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// ErrSemaphoreSize: a semaphore acquisition asked for a size other than
// the one the key's holders hold it with ([Locker.Semaphore]). Nothing
// changed. It matches [sqlock.ErrSemaphoreSize].
var ErrSemaphoreSize = errkind.New(sqlock.ErrSemaphoreSize, "redislock: semaphore held with another size")

// semPrefix begins every semaphore's hash key. Its NUL byte is refused in
// lock keys, so no lock is ever a semaphore, nor a semaphore a lock.
const semPrefix = "\x00semaphore"

// SemaphoreKey is the key of the hash that holds the semaphore called key:
// its size and, per slot, the holder's owner, expiry and token. Like [FenceKey],
// it holds a NUL byte and is in key's Redis Cluster hash slot; the
// semaphore's tokens come from the counter [FenceKey](SemaphoreKey(key)),
// in that slot too.
func SemaphoreKey(key string) string { return auxKey(semPrefix, key) }

// The semaphore's scripts. Every time in them is the server's (TIME, in
// ms), so that every slot's expiry is decided by one clock; the hash
// itself expires with its last live slot, so a name whose holders all
// crashed leaves nothing behind. Fields: "size", and per slot i (0-based)
// "o<i>" its owner, "e<i>" its expiry and "t<i>" its token.
var (
	// semAcquireScript takes the first free slot and mints its token in one
	// atomic step: {token, slot, 0, 0} if granted; {0, 0, the first live
	// slot's remaining ms, 0} if every slot is held; {0, 0, 0, size} if
	// the key is held with another size. A key whose slots are all free
	// takes the caller's size.
	semAcquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[3])
local size = tonumber(redis.call('HGET', KEYS[1], 'size') or '0')
local live, soonest, last = 0, -1, now
for i = 0, size - 1 do
  local e = tonumber(redis.call('HGET', KEYS[1], 'e' .. i) or '0')
  if e > now then
    live = live + 1
    if soonest < 0 or e - now < soonest then soonest = e - now end
    if e > last then last = e end
  end
end
if live > 0 and size ~= n then return {0, 0, 0, size} end
if live == 0 then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'size', n)
end
for i = 0, n - 1 do
  local e = tonumber(redis.call('HGET', KEYS[1], 'e' .. i) or '0')
  if e <= now then
    local exp = now + tonumber(ARGV[2])
    local tok = redis.call('INCR', KEYS[2])
    redis.call('HSET', KEYS[1], 'o' .. i, ARGV[1], 'e' .. i, exp, 't' .. i, tok)
    if exp > last then last = exp end
    redis.call('PEXPIRE', KEYS[1], last - now)
    return {tok, i, 0, 0}
  end
end
return {0, 0, soonest, 0}`)
	// semExtendScript extends slot ARGV[3] only while it is the owner's
	// and live, and the hash with it.
	semExtendScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local i = ARGV[3]
if redis.call('HGET', KEYS[1], 'o' .. i) ~= ARGV[1] then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'e' .. i) or '0') <= now then return 0 end
redis.call('HSET', KEYS[1], 'e' .. i, now + tonumber(ARGV[2]))
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1`)
	// semReleaseScript frees slot ARGV[2] only while it is the owner's and
	// live.
	semReleaseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local i = ARGV[2]
if redis.call('HGET', KEYS[1], 'o' .. i) ~= ARGV[1] then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'e' .. i) or '0') <= now then return 0 end
redis.call('HDEL', KEYS[1], 'o' .. i, 'e' .. i, 't' .. i)
return 1`)
)

// Semaphore returns a [sqlock.SemaphoreAcquirer] of n slots per key on
// lk's server, each slot held for ttl (a *[Slot]): renewed every ttl/3,
// owner-checked and lost as a [Lock] is, with a fencing token from the
// semaphore's own counter. One script grants a slot, checking the size and
// minting the token in the same atomic step; waiters retry with the
// Locker's jittered pauses, never much past the first holder's expiry. A
// key is held with one size at a time: another size while any slot is
// held is [ErrSemaphoreSize]. n below 1, a bad key or ttl is
// [ErrInvalid], refused by every acquisition before anything is sent.
// WithReplicas applies to the grant and renewals as to a Lock's;
// WithHolder and WithPayload are not stored for slots.
func (lk *Locker) Semaphore(n int, ttl time.Duration) sqlock.SemaphoreAcquirer {
	s := &semaphore{lk: lk, n: n, ttl: ttl}
	return ttllock.SemaphoreAcquirer(s.acquire, s.tryAcquire, n)
}

type semaphore struct {
	lk  *Locker
	n   int
	ttl time.Duration
}

func (s *semaphore) acquire(ctx context.Context, key string) (*Slot, error) {
	return s.take(ctx, "acquire", key, true)
}

func (s *semaphore) tryAcquire(ctx context.Context, key string) (*Slot, error) {
	return s.take(ctx, "tryacquire", key, false)
}

func (s *semaphore) take(ctx context.Context, op, key string, wait bool) (*Slot, error) {
	if s.lk == nil {
		return nil, kit.NilHandle(op, key, "Locker")
	}
	return ttllock.Acquire(ctx, &s.lk.base, (*semStore)(s), ttllock.Request{Op: op, Name: key, TTL: s.ttl, Wait: wait},
		func() (*Slot, *ttllock.Lock) {
			l := &Slot{}
			return l, &l.tl
		})
}

// semStore is a semaphore seen by the TTL-lock toolkit.
type semStore semaphore

func (s *semStore) Check(key string, ttl time.Duration) (time.Duration, error) {
	if err := ttllock.CheckSize(s.n); err != nil {
		return 0, err
	}
	return check(key, ttl)
}

// Grant is one attempt, with a fresh owner.
func (s *semStore) Grant(ctx context.Context, key string, ttl time.Duration, _ bool) (ttllock.Grant, error) {
	c, rep := s.lk.c, s.lk.cfg.replicas
	sk := SemaphoreKey(key)
	h := &semHeld{c: c, rep: rep, keys: []string{sk, FenceKey(sk)}, owner: newOwner(), ttl: ttl.Milliseconds()}
	cmd, acked, err := rep.run(ctx, c, semAcquireScript, h.keys, h.owner, h.ttl, s.n)
	var res []int64
	if err == nil {
		res, err = cmd.Int64Slice()
	}
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return ttllock.Grant{}, err // the slot is unknown: it expires by its TTL
	}
	switch {
	case res[3] != 0:
		return ttllock.Grant{}, ttllock.Refuse(ErrSemaphoreSize, ttllock.SizeMismatch(s.n, int(res[3])))
	case res[0] == 0:
		return ttllock.Grant{Remaining: time.Duration(res[2]) * time.Millisecond}, nil
	}
	h.slot = int(res[1])
	if acked < rep.n {
		h.cleanUp()
		return rep.refuse(acked), nil
	}
	return ttllock.Grant{Held: h, Token: res[0]}, nil
}

// semHeld is a slot held on one server.
type semHeld struct {
	c     redis.UniversalClient
	rep   replicas
	keys  []string // the semaphore's hash, its counter
	owner string
	ttl   int64 // ms
	slot  int
}

func (h *semHeld) Renew(ctx context.Context) (refused bool, err error) {
	cmd, acked, err := h.rep.run(ctx, h.c, semExtendScript, h.keys[:1], h.owner, h.ttl, h.slot)
	var n int64
	if err == nil {
		n, err = cmd.Int64()
	}
	switch {
	case err != nil:
		return false, err
	case n == 0:
		return true, nil
	case acked < h.rep.n:
		return false, h.rep.renewal(acked)
	}
	return false, nil
}

func (h *semHeld) Release(ctx context.Context) (notHeld bool, err error) {
	n, err := semReleaseScript.Run(ctx, h.c, h.keys[:1], h.owner, h.slot).Int64()
	return err == nil && n == 0, err
}

func (h *semHeld) cleanUp() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	h.Release(ctx)
}

// Slot is a held slot of a Redis semaphore ([Locker.Semaphore]), with a
// fencing token. Its methods are safe for concurrent use.
type Slot struct {
	hold
}

// A Slot is a [sqlock.Slot]: a [sqlock.Fenced] lock with its index.
var _ sqlock.Slot = (*Slot)(nil)

// Index is which of the semaphore's slots this is, 0 to N−1.
func (l *Slot) Index() int {
	if h, ok := l.tl.Held().(*semHeld); ok {
		return h.slot
	}
	return -1
}

// Token is the slot's fencing token: the semaphore's counter, incremented
// in the step that granted the slot, so greater than that of every
// earlier holder of any slot of the key (with the caveats of [Lock.Token]).
// Fence the data of this slot (Index) with it.
func (l *Slot) Token() int64 { return l.tl.Token() }

// Context returns a context that ends when the slot is lost and carries
// its fencing token ([sqlock.WithFencingToken]).
func (l *Slot) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.tl.Context(parent)
}

// Release frees the slot where it is still this holder's, as
// [Lock.Release] does a lock.
func (l *Slot) Release(ctx context.Context) error {
	if l == nil {
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}
