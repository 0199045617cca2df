package redislock

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// MinTTL is the shortest TTL a lock may have: below it the drift allowance
// (1% of the TTL plus 2 ms) and a renewal every TTL/3 leave no room. TTLs
// are counted in whole milliseconds, as Redis's PX does.
const MinTTL = 10 * time.Millisecond

// FenceSuffix named the fencing counter of earlier versions, key+FenceSuffix,
// which a lock called key+FenceSuffix collided with. The counter is now
// [FenceKey]; an old counter left in Redis is still read, so that tokens
// stay above the ones it minted.
//
// Deprecated: the counter is at [FenceKey].
const FenceSuffix = ":fence"

// fencePrefix begins every fencing counter's key. Its NUL byte is refused
// in lock keys (ErrInvalid), so no lock key is ever a counter.
const fencePrefix = "\x00fence"

// FenceKey is the key of the counter that mints key's fencing tokens: a
// key no lock key can be (it holds a NUL byte, which lock keys may not),
// in key's Redis Cluster hash slot — it carries key's hash tag if key has
// one ("{orders}:lock" → "\x00fence:{orders}:lock"), and key as its tag if
// not ("job" → "\x00fence{job}"). Only a key with a '}' and no hash tag
// ("a}b") has its counter in another slot: in Redis Cluster such a lock
// fails with CROSSSLOT; give its key a hash tag.
func FenceKey(key string) string { return auxKey(fencePrefix, key) }

// auxKey is the key, beginning with prefix, of something kept beside the
// lock called key (its counter, its holder's label): in key's hash slot,
// as FenceKey says.
func auxKey(prefix, key string) string {
	if hasHashTag(key) || strings.IndexByte(key, '}') >= 0 {
		return prefix + ":" + key
	}
	return prefix + "{" + key + "}"
}

// hasHashTag reports whether key has a Redis Cluster hash tag: a '{'
// followed, later, by a '}' with something between them (only the first
// '{' counts).
func hasHashTag(key string) bool {
	i := strings.IndexByte(key, '{')
	return i >= 0 && strings.IndexByte(key[i+1:], '}') > 0
}

// lockKeys are the keys of key's acquiring script: the lock's, its
// counter's, and the counter of earlier versions (key+FenceSuffix) where a
// script may touch it — always on one server, and on a cluster or ring
// only when key has a hash tag (without one the old counter is in another
// slot, where the old script could not have reached it either).
func lockKeys(c redis.UniversalClient, key string) []string {
	if _, one := c.(*redis.Client); one || hasHashTag(key) {
		return []string{key, FenceKey(key), key + FenceSuffix}
	}
	return []string{key, FenceKey(key)}
}

// The scripts. Each is sent with EVALSHA, and with EVAL when the server
// does not know it yet (redis.Script's fallback), so each is one round trip
// once loaded.
var (
	// acquireScript takes the lock and mints its fencing token in one
	// atomic step: {token, 0} if granted, {0, the holder's remaining ms}
	// if not. The token stays above the old counter KEYS[3], if given and
	// it holds a counter's value (a lock once called key:fence holds an
	// owner, and is not one): the counter is set to it and incremented by
	// Redis, in its integers (at most 15 digits: exact in Lua's doubles).
	acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('INCR', KEYS[2])
  if KEYS[3] then
    local old = redis.pcall('GET', KEYS[3])
    if type(old) == 'string' and #old <= 15 and string.match(old, '^%d+$') and tonumber(old) >= t then
      redis.call('SET', KEYS[2], old)
      t = redis.call('INCR', KEYS[2])
    end
  end
  return {t, 0}
end
return {0, redis.call('PTTL', KEYS[1])}`)
	// extendScript sets the expiry only if the key is still the owner's.
	extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	// releaseScript deletes the key only if it is still the owner's.
	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// Locker takes locks on one Redis server. It is safe for concurrent use;
// make one per client and share it.
type Locker struct {
	base ttllock.Base // the options, New's error, the held locks' timers
	cfg  config
	c    redis.UniversalClient
}

// New returns a Locker on client (a *redis.Client, a *redis.ClusterClient,
// a failover client — any [redis.UniversalClient]).
//
// New does not fail: a nil client or an invalid option is reported, as an
// error matching [sqlock.ErrNilHandle] or [sqlock.ErrInvalidOption], by
// every method.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	lk := &Locker{c: client}
	cfg, err := buildConfig(opts)
	switch {
	case err != nil:
		err = &Error{Op: "new", Cause: err}
	case isNil(client):
		err = &Error{Op: "new", Cause: errkind.New(sqlock.ErrNilHandle, "redislock: nil client")}
	default:
		if err = cfg.replicas.check(client); err != nil {
			err = &Error{Op: "new", Cause: err}
		}
	}
	lk.cfg = cfg
	lk.base.Init(&kit, cfg.Config, err)
	return lk
}

// Acquire takes the lock called key for ttl, waiting while someone else
// holds it — retrying after a jittered pause, never past the holder's
// expiry — for at most the Locker's timeout (WithTimeout) or ctx's
// deadline, whichever is first. A wait that runs out returns an error
// matching [ErrTimeout].
//
// The lock is renewed every ttl/3 until Release; [Lock.Lost] fires when it
// can no longer be trusted.
func (lk *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	return lk.observed(ctx, "acquire", key, ttl, true)
}

// TryAcquire is Acquire without the wait: if the lock is held it returns
// an error matching [ErrNotAcquired] at once.
func (lk *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	return lk.observed(ctx, "tryacquire", key, ttl, false)
}

// observed is an acquisition, which the TTL-lock toolkit reports to the
// Locker's observer.
func (lk *Locker) observed(ctx context.Context, op, key string, ttl time.Duration, wait bool) (*Lock, error) {
	if lk == nil {
		return nil, kit.NilHandle(op, key, "Locker")
	}
	return ttllock.Acquire(ctx, &lk.base, (*lockerStore)(lk), ttllock.Request{Op: op, Name: key, TTL: ttl, Wait: wait},
		func() (*Lock, *ttllock.Lock) {
			l := &Lock{}
			return l, &l.tl
		})
}

// lockerStore is a Locker seen by the TTL-lock toolkit: one script per
// attempt.
type lockerStore Locker

func (s *lockerStore) Check(key string, ttl time.Duration) (time.Duration, error) {
	return check(key, ttl)
}

// Grant is one attempt, with a fresh owner, so that a late command of one
// given up cannot touch the next's key.
// A lock that carries a label or payload is taken by AcquireAll's script,
// on one key.
func (s *lockerStore) Grant(ctx context.Context, key string, ttl time.Duration, _ bool) (ttllock.Grant, error) {
	lk := (*Locker)(s)
	if lk.cfg.info.set {
		return lk.many([]string{key}, ttl).grant(ctx)
	}
	srv := &oneServer{c: s.c, rep: lk.cfg.replicas, keys: lockKeys(s.c, key), owner: newOwner(), ttl: ttl.Milliseconds()}
	cmd, acked, err := srv.rep.run(ctx, s.c, acquireScript, srv.keys, srv.owner, srv.ttl)
	var res []int64
	if err == nil {
		res, err = cmd.Int64Slice()
	}
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		srv.cleanUp() // the answer may be lost, not the grant
		return ttllock.Grant{}, err
	}
	switch {
	case res[0] == 0:
		return ttllock.Grant{Remaining: time.Duration(res[1]) * time.Millisecond}, nil
	case acked < srv.rep.n:
		srv.cleanUp()
		return srv.rep.refuse(acked), nil
	}
	return ttllock.Grant{Held: srv, Token: res[0]}, nil
}

// check refuses bad input before anything is sent, and returns the TTL in
// whole milliseconds.
func check(key string, ttl time.Duration) (time.Duration, error) {
	ttl = ttl.Truncate(time.Millisecond)
	switch {
	case key == "":
		return 0, errors.New("empty key")
	case strings.IndexByte(key, 0) >= 0:
		return 0, errors.New("key holds a NUL byte (the fencing counters' key space)")
	case ttl < MinTTL:
		return 0, fmt.Errorf("TTL %v is shorter than %v (drift allowance %v)", ttl, MinTTL, drift(ttl))
	}
	return ttl, nil
}

// cleanupTimeout bounds the release of an acquisition whose answer was
// lost: if the server granted it, it is given back rather than left to
// expire.
const cleanupTimeout = 500 * time.Millisecond

// oneServer is a lock held on one Redis server.
type oneServer struct {
	c     redis.UniversalClient
	rep   replicas // renewals wait for them too
	keys  []string // the lock's key, then its fencing counters' (lockKeys)
	owner string
	ttl   int64 // ms
}

// Renew extends the key; with replicas to wait for, a renewal they did
// not acknowledge does not count (it is tried again): were the primary
// lost, a promoted replica would expire the key at its older deadline.
func (s *oneServer) Renew(ctx context.Context) (refused bool, err error) {
	cmd, acked, err := s.rep.run(ctx, s.c, extendScript, s.keys[:1], s.owner, s.ttl)
	var n int64
	if err == nil {
		n, err = cmd.Int64()
	}
	switch {
	case err != nil:
		return false, err
	case n == 0:
		return true, nil
	case acked < s.rep.n:
		return false, s.rep.renewal(acked)
	}
	return false, nil
}

func (s *oneServer) Release(ctx context.Context) (notHeld bool, err error) {
	n, err := releaseScript.Run(ctx, s.c, s.keys[:1], s.owner).Int64()
	return err == nil && n == 0, err
}

func (s *oneServer) cleanUp() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	s.Release(ctx)
}

// Lock is a lock held on one Redis server, with a fencing token. Its
// methods are safe for concurrent use.
type Lock struct {
	hold
}

// A Lock is a [sqlock.Lock] with a fencing token.
var _ sqlock.Fenced = (*Lock)(nil)

// Token is the lock's fencing token: the value of the counter [FenceKey]
// that the acquiring script incremented in the same atomic step that took
// the lock, so it is greater than every earlier holder's — as long as the
// counter survives (appendfsync always, no failover to a replica that
// missed the increment; see the package doc). Write it beside the data the
// lock protects and refuse writes that carry a smaller one.
func (l *Lock) Token() int64 { return l.tl.Token() }

// Context returns a context derived from parent that ends when the lock is
// lost (its cause then matches [ErrLost]) or cancel is called, and that
// carries the lock's fencing token ([sqlock.WithFencingToken]): the fenced
// writes of versioned, sqlxhelpers and gormplugin made with it are refused
// by PostgreSQL once a newer holder has written. Call cancel when done.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.tl.Context(parent)
}

// Release stops the renewals and deletes the key if it is still this
// holder's (an owner-checked script), detached from ctx's cancellation with
// a bound of its own, so a cancelled request still releases. It returns nil
// if the server confirmed; an error matching [ErrNotHeld] if the key had
// expired or been taken over (nothing changed) or Release already ran;
// otherwise Redis's error (the key then expires by its TTL).
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}

// newOwner returns 128 random bits as hex: the owner value that the
// scripts check.
func newOwner() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// isNil reports whether c is nil or a typed nil pointer.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
