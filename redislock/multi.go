package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// MaxKeys is the most keys one AcquireAll takes.
const MaxKeys = 1000

// The scripts of a lock on several keys, or of one that carries a label
// and payload (WithHolder, WithPayload). KEYS are one group of stride keys
// per lock key, in canonical (sorted) order: the lock's key, its counter
// (FenceKey), the counter of earlier versions if old is '1' (see
// acquireScript), and its holder's hash if info is '1'.
var (
	// grantAllScript takes every key or none: if one is held it returns
	// {0, that key's index from 1, its PTTL} and writes nothing; otherwise
	// {1, token of each key, in order}.
	grantAllScript = redis.NewScript(`
local owner, ttl, s, old, info = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1', ARGV[5] == '1'
for b = 1, #KEYS, s do
  if redis.call('EXISTS', KEYS[b]) == 1 then
    return {0, (b - 1) / s + 1, redis.call('PTTL', KEYS[b])}
  end
end
local out = {1}
for b = 1, #KEYS, s do
  redis.call('SET', KEYS[b], owner, 'PX', ttl)
  local t = redis.call('INCR', KEYS[b+1])
  if old then
    local o = redis.pcall('GET', KEYS[b+2])
    if type(o) == 'string' and #o <= 15 and string.match(o, '^%d+$') and tonumber(o) >= t then
      redis.call('SET', KEYS[b+1], o)
      t = redis.call('INCR', KEYS[b+1])
    end
  end
  if info then
    local h = KEYS[b+s-1]
    redis.call('DEL', h)
    redis.call('HSET', h, 'owner', owner, 'label', ARGV[6], 'payload', ARGV[7])
    redis.call('PEXPIRE', h, ttl)
  end
  out[#out+1] = t
end
return out`)
	// extendAllScript extends every key (and holder's hash) if every key is
	// still the owner's; otherwise it changes nothing and returns 0.
	extendAllScript = redis.NewScript(`
local owner, ttl, s, info = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
for b = 1, #KEYS, s do
  if redis.call('GET', KEYS[b]) ~= owner then return 0 end
end
for b = 1, #KEYS, s do
  redis.call('PEXPIRE', KEYS[b], ttl)
  if info then redis.call('PEXPIRE', KEYS[b+s-1], ttl) end
end
return 1`)
	// releaseAllScript deletes each key still the owner's (and its
	// holder's hash) and returns how many it deleted.
	releaseAllScript = redis.NewScript(`
local owner, s, info = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local n = 0
for b = 1, #KEYS, s do
  if redis.call('GET', KEYS[b]) == owner then
    redis.call('DEL', KEYS[b])
    if info then redis.call('DEL', KEYS[b+s-1]) end
    n = n + 1
  end
end
return n`)
)

// group is the keys of grantAllScript for the lock keys names, sorted and
// unique: stride keys per name, and whether the old counters are among
// them. As lockKeys, the old counter is reached on one server always, and
// on a cluster or ring only when every name has a hash tag.
type group struct {
	names  []string
	keys   []string
	stride int
	old    bool
	info   info
}

func newGroup(c redis.UniversalClient, names []string, in info) *group {
	_, one := c.(*redis.Client)
	g := &group{names: names, old: one || !slices.ContainsFunc(names, func(k string) bool { return !hasHashTag(k) }), info: in}
	g.stride = 2 + b2i(g.old) + b2i(in.set)
	g.keys = make([]string, 0, g.stride*len(names))
	for _, k := range names {
		g.keys = append(g.keys, k, FenceKey(k))
		if g.old {
			g.keys = append(g.keys, k+FenceSuffix)
		}
		if in.set {
			g.keys = append(g.keys, holderKey(k))
		}
	}
	return g
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// many is an attempt at names for ttl by a fresh owner.
func (lk *Locker) many(names []string, ttl time.Duration) *many {
	return &many{c: lk.c, rep: lk.cfg.replicas, g: newGroup(lk.c, names, lk.cfg.info), owner: newOwner(), ttl: ttl.Milliseconds()}
}

// many is a lock held on several keys of one server, or on one that
// carries a label: one owner for all, each request one script.
type many struct {
	c      redis.UniversalClient
	rep    replicas
	g      *group
	owner  string
	ttl    int64 // ms
	tokens []int64
}

// grant is one attempt at every key of g.
func (m *many) grant(ctx context.Context) (ttllock.Grant, error) {
	res, acked, err := m.rep.run(ctx, m.c, grantAllScript, m.g.keys,
		m.owner, m.ttl, m.g.stride, b2i(m.g.old), b2i(m.g.info.set), m.g.info.label, m.g.info.payload)
	var vals []int64
	if err == nil {
		vals, err = res.Int64Slice()
	}
	if err == nil && (len(vals) == 0 || vals[0] == 1 && len(vals) != len(m.g.names)+1 || vals[0] != 1 && len(vals) != 3) {
		err = fmt.Errorf("unexpected reply %v", vals)
	}
	if err != nil {
		m.cleanUp() // the answer may be lost, not the grant
		return ttllock.Grant{}, err
	}
	if vals[0] != 1 {
		return ttllock.Grant{Remaining: time.Duration(vals[2]) * time.Millisecond}, nil
	}
	if acked < m.rep.n {
		m.cleanUp()
		return m.rep.refuse(acked), nil
	}
	m.tokens = vals[1:]
	return ttllock.Grant{Held: m, Token: m.tokens[0]}, nil
}

func (m *many) Renew(ctx context.Context) (refused bool, err error) {
	res, acked, err := m.rep.run(ctx, m.c, extendAllScript, m.g.keys, m.owner, m.ttl, m.g.stride, b2i(m.g.info.set))
	if err != nil {
		return false, err
	}
	n, err := res.Int64()
	switch {
	case err != nil:
		return false, err
	case n == 0:
		return true, nil
	case acked < m.rep.n:
		return false, m.rep.renewal(acked)
	}
	return false, nil
}

func (m *many) Release(ctx context.Context) (notHeld bool, err error) {
	n, err := releaseAllScript.Run(ctx, m.c, m.g.keys, m.owner, m.g.stride, b2i(m.g.info.set)).Int64()
	return err == nil && n == 0, err
}

func (m *many) cleanUp() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	m.Release(ctx)
}

// AcquireAll takes the locks called keys for ttl, all or none, waiting
// while any is held, as [Locker.Acquire] does for one: each attempt is one
// script on the Locker's server that takes every key, in sorted order, or
// — if one is held — writes nothing, so no partial hold is ever left, and
// two callers asking for overlapping sets cannot deadlock. Each key gets
// its own fencing token ([MultiLock.Token]). keys must be 1 to [MaxKeys]
// valid lock keys, none repeated: otherwise an error matching [ErrInvalid].
// On a Redis Cluster every key, with its counter, must be in one hash slot:
// give them one hash tag ("{orders}:1", "{orders}:2"), or the script fails
// with CROSSSLOT.
//
// Redlock offers no AcquireAll: see docs/redislock.md.
func (lk *Locker) AcquireAll(ctx context.Context, keys []string, ttl time.Duration) (*MultiLock, error) {
	return lk.all(ctx, "acquireall", keys, ttl, true)
}

// TryAcquireAll is AcquireAll without the wait: if any key is held it
// returns an error matching [ErrNotAcquired] at once, holding none.
func (lk *Locker) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) (*MultiLock, error) {
	return lk.all(ctx, "tryacquireall", keys, ttl, false)
}

func (lk *Locker) all(ctx context.Context, op string, keys []string, ttl time.Duration, wait bool) (*MultiLock, error) {
	names := slices.Clone(keys)
	slices.Sort(names)
	name := strings.Join(names, ",")
	if lk == nil {
		return nil, kit.NilHandle(op, name, "Locker")
	}
	st := &allStore{lk: lk, names: names}
	l, err := ttllock.Acquire(ctx, &lk.base, st, ttllock.Request{Op: op, Name: name, TTL: ttl, Wait: wait},
		func() (*MultiLock, *ttllock.Lock) {
			l := &MultiLock{names: names}
			return l, &l.tl
		})
	if err != nil {
		return nil, err
	}
	l.tokens = l.tl.Held().(*many).tokens
	return l, nil
}

// allStore is one AcquireAll seen by the TTL-lock toolkit.
type allStore struct {
	lk    *Locker
	names []string
}

func (s *allStore) Check(_ string, ttl time.Duration) (time.Duration, error) {
	switch {
	case len(s.names) == 0:
		return 0, errors.New("no keys")
	case len(s.names) > MaxKeys:
		return 0, fmt.Errorf("%d keys, more than %d", len(s.names), MaxKeys)
	}
	for i, k := range s.names {
		if i > 0 && k == s.names[i-1] {
			return 0, fmt.Errorf("key %q given twice", k)
		}
		if _, err := check(k, ttl); err != nil {
			return 0, fmt.Errorf("key %q: %w", k, err)
		}
	}
	return check(s.names[0], ttl)
}

func (s *allStore) Grant(ctx context.Context, _ string, ttl time.Duration, _ bool) (ttllock.Grant, error) {
	g, err := s.lk.many(s.names, ttl).grant(ctx)
	g.Token = 0 // each key has its own: none in the Context
	return g, err
}

// MultiLock is the locks on several keys of one Redis server that
// [Locker.AcquireAll] took together: renewed together, lost together (when
// any key is no longer the holder's), released together. Its methods are
// safe for concurrent use. It is a [sqlock.Lock]; its Context carries no
// fencing token, since each key has its own ([MultiLock.Token]).
type MultiLock struct {
	tl     ttllock.Lock
	names  []string
	tokens []int64
}

var _ sqlock.Lock = (*MultiLock)(nil)

// Keys are the lock's keys, sorted.
func (l *MultiLock) Keys() []string { return slices.Clone(l.names) }

// Token is key's fencing token, minted with the grant as [Lock.Token] is;
// false if key is not one of the lock's.
func (l *MultiLock) Token(key string) (int64, bool) {
	i, ok := slices.BinarySearch(l.names, key)
	if !ok {
		return 0, false
	}
	return l.tokens[i], true
}

// Deadline is as [Lock]'s: the local time until which every key is
// trusted.
func (l *MultiLock) Deadline() time.Time { return l.tl.Deadline() }

// Lost is closed when the keys can no longer be trusted: a renewal found
// one of them no longer the holder's, or none was confirmed in time.
func (l *MultiLock) Lost() <-chan struct{} { return l.tl.Lost() }

// Err is nil while the lock is trusted, then an error matching [ErrLost].
func (l *MultiLock) Err() error { return l.tl.Err() }

// Context returns a context derived from parent that ends when the lock is
// lost (its cause then matches [ErrLost]) or cancel is called.
func (l *MultiLock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.tl.Context(parent)
}

// Release deletes every key still the holder's, in one script, as
// [Lock.Release] does for one: [ErrNotHeld] if none was.
func (l *MultiLock) Release(ctx context.Context) error {
	if l == nil {
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}
