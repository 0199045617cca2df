package dynamo

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// The attributes of a lock item. The table's partition key is AttrName, a
// string; the others are written by the lock's conditional writes.
const (
	AttrName  = "name"     // the lock's name (the partition key)
	AttrOwner = "owner"    // the holder: 128 random bits, new for every acquisition; absent when free
	AttrRV    = "rvn"      // the record version: 128 random bits, new at every grant and renewal
	AttrLease = "lease_ms" // the holder's TTL in milliseconds: how long a waiter must watch the record version
	AttrFence = "fence"    // the fencing counter: the last token granted (kept when the lock is released)
)

// MinTTL is the shortest TTL a lock may have: below it a renewal every
// TTL/3 leaves no room. TTLs are counted in whole milliseconds.
const MinTTL = 10 * time.Millisecond

// MaxNameLen is the longest lock name, in bytes: DynamoDB's limit for a
// partition key.
const MaxNameLen = 2048

// Locker takes locks on one DynamoDB table (see [CreateLockTable]). It is
// safe for concurrent use; make one per table and share it: it remembers
// which record versions it has watched (see the package doc), so that a
// TryAcquire after the holder's TTL can take over a lock whose holder
// vanished.
type Locker struct {
	base  ttllock.Base // the options, NewLocker's error, the held locks' timers
	c     *dynamodb.Client
	table string

	mu      sync.Mutex
	watched map[string]sighting // by lock name
}

// sighting is a record version this Locker has seen on a held lock, and
// since when: the local monotonic time at which the answer that showed it
// arrived — after DynamoDB wrote it, whatever the clocks say.
type sighting struct {
	rvn   string
	lease time.Duration // the holder's TTL, from the record; < 0: unknown, never taken over
	since time.Time
}

// complete reports whether the record version has been watched, unchanged,
// for the holder's whole TTL.
func (s sighting) complete(now time.Time) bool {
	return s.lease >= 0 && now.Sub(s.since) >= s.lease
}

// NewLocker returns a Locker on the lock table called table.
//
// NewLocker does not fail: a nil client, an empty table name or an invalid
// option is reported, as an error matching [sqlock.ErrNilHandle],
// [ErrInvalid] or [sqlock.ErrInvalidOption], by every method.
func NewLocker(client *dynamodb.Client, table string, opts ...Option) *Locker {
	lk := &Locker{c: client, table: table, watched: map[string]sighting{}}
	cfg, err := buildConfig(opts)
	switch {
	case err != nil:
		err = &Error{Op: "new", Table: table, Cause: err}
	case client == nil:
		err = &Error{Op: "new", Table: table, Cause: errkind.New(sqlock.ErrNilHandle, "dynamo: nil client")}
	case table == "":
		err = invalid("new", "", "", "empty table name")
	}
	// The toolkit's errors for this Locker's locks name its table.
	lk.base.Init(kit.WithError(func(op, name string, kind, cause error) error {
		return &Error{Op: op, Table: table, Name: name, Err: kind, Cause: cause}
	}), cfg.Config, err)
	return lk
}

// Acquire takes the lock called name for ttl, waiting while someone else
// holds it — polling its record with jittered pauses — for at most the
// Locker's timeout (WithTimeout) or ctx's deadline, whichever is first. A
// wait that runs out returns an error matching [ErrTimeout]. A lock whose
// holder stopped renewing it (it crashed, or is paused) is taken over once
// this Locker has watched its record version unchanged for the holder's
// whole TTL.
//
// The lock is renewed every ttl/3 until Release; [Lock.Lost] fires when it
// can no longer be trusted.
func (lk *Locker) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lock, error) {
	return lk.acquire(ctx, "acquire", name, ttl, true)
}

// TryAcquire is Acquire without the wait: if the lock is held it returns
// an error matching [ErrNotAcquired] at once. It takes over a lock whose
// record version this Locker has already watched unchanged for the
// holder's TTL (by earlier calls); otherwise it records what it saw, so a
// later TryAcquire can.
func (lk *Locker) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*Lock, error) {
	return lk.acquire(ctx, "tryacquire", name, ttl, false)
}

// acquire is one acquisition, through the toolkit (package
// internal/ttllock), with an acquisition of its own as the Store.
func (lk *Locker) acquire(ctx context.Context, op, name string, ttl time.Duration, wait bool) (*Lock, error) {
	if lk == nil {
		return nil, kit.NilHandle(op, name, "Locker")
	}
	r := ttllock.Request{Op: op, Name: name, TTL: ttl, Wait: wait}
	return ttllock.Acquire(ctx, &lk.base, &acquisition{lk: lk}, r, func() (*Lock, *ttllock.Lock) {
		l := &Lock{}
		return l, &l.tl
	})
}

// tryWrites bounds TryAcquire's writes: a lock found free by the read
// after a refused write is tried again, but not for ever.
const tryWrites = 3

// acquisition is one Acquire or TryAcquire seen by the toolkit: a Store
// whose attempts go on from where the last one stopped. An attempt writes
// the grant; once a write was refused, the next ones read the lock's
// record (a consistent GetItem, no write) until it is free or its record
// version has stayed the same for the holder's TTL, and only then write
// again. The toolkit pauses between attempts, never much past the end of
// that watch.
//
// Round trips: one UpdateItem for a free lock; a refused one, then one
// GetItem per poll while it is held.
type acquisition struct {
	lk       *Locker
	cand     *held     // the last write's owner and record version
	sent     time.Time // when the last write was sent
	watching bool      // the last write was refused: read before writing again
	writes   int
}

// Check refuses bad input before anything is sent, and returns the TTL in
// whole milliseconds.
func (a *acquisition) Check(name string, ttl time.Duration) (time.Duration, error) {
	return check(name, ttl)
}

// Grant is one attempt: the grant's write unless the last one was refused,
// then a read of the lock's record. Not granted, it says how long the
// watch has left.
func (a *acquisition) Grant(ctx context.Context, name string, ttl time.Duration, wait bool) (ttllock.Grant, error) {
	lk := a.lk
	for {
		if !a.watching {
			a.writes++
			a.cand = &held{lk: lk, name: name, owner: newID(), rvn: newID(), ttl: ttl}
			a.sent = time.Now()
			token, err := lk.grant(ctx, a.cand, lk.takeover(name))
			if err == nil {
				lk.forget(name)
				return ttllock.Grant{Held: a.cand, Token: token, Sent: a.sent}, nil
			}
			if failed, _ := conditionFailed(err); !failed {
				lk.cleanUp(a.cand) // the answer may be lost, not the grant
				return ttllock.Grant{}, err
			}
			a.watching = true
		}
		// Refused: the lock is held (or was taken over meanwhile). Watch
		// its record until it is free or its version has stayed the same
		// for the holder's TTL.
		rec, err := lk.read(ctx, name)
		if err != nil {
			return ttllock.Grant{}, err
		}
		if rec.owner != "" && rec.owner == a.cand.owner {
			// Granted by a request the client's retryer sent again after
			// its first answer was lost: the lock is ours.
			lk.forget(name)
			return ttllock.Grant{Held: a.cand, Token: rec.fence, Sent: a.sent}, nil
		}
		if rec.owner != "" {
			if s := lk.saw(name, rec); !s.complete(time.Now()) {
				return ttllock.Grant{Remaining: time.Until(s.since.Add(s.lease))}, nil
			}
		}
		a.watching = false // free, or watched for the TTL: write again
		if !wait && a.writes >= tryWrites {
			return ttllock.Grant{Remaining: -1, Refused: ttllock.Refuse(ErrNotAcquired,
				errors.New("the lock changed hands at every attempt"))}, nil
		}
	}
}

// check refuses a bad lock name or TTL, and returns the TTL in whole
// milliseconds.
func check(name string, ttl time.Duration) (time.Duration, error) {
	ttl = ttl.Truncate(time.Millisecond)
	switch {
	case name == "":
		return 0, errors.New("empty lock name")
	case len(name) > MaxNameLen:
		return 0, fmt.Errorf("lock name of %d bytes, longer than DynamoDB's %d for a key", len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return 0, errors.New("lock name is not valid UTF-8 (a DynamoDB string)")
	case ttl < MinTTL:
		return 0, fmt.Errorf("TTL %v is shorter than %v", ttl, MinTTL)
	}
	return ttl, nil
}

// grant is the one conditional write that takes the lock and mints its
// fencing token: it sets the owner, a new record version and the lease,
// and adds one to the fencing counter, if the lock is free — or, for a
// takeover, if its record version is still the one watched for the
// holder's TTL. It returns the token.
func (lk *Locker) grant(ctx context.Context, l *held, takeover string) (int64, error) {
	var e expr
	owner := e.name(AttrOwner)
	cond := "attribute_not_exists(" + owner + ")"
	if takeover != "" {
		cond += " OR " + e.name(AttrRV) + " = " + e.str(takeover)
	}
	e.cond(cond)
	e.assign(AttrOwner, &types.AttributeValueMemberS{Value: l.owner})
	e.assign(AttrRV, &types.AttributeValueMemberS{Value: l.rvn})
	e.assign(AttrLease, &types.AttributeValueMemberN{Value: strconv.FormatInt(l.ttl.Milliseconds(), 10)})
	e.add = append(e.add, e.name(AttrFence)+" "+e.num(1))
	in := lk.update(l.name, &e)
	in.ReturnValues = types.ReturnValueUpdatedNew
	out, err := lk.c.UpdateItem(ctx, in)
	if err != nil {
		return 0, err
	}
	token, ok, err := number(out.Attributes[AttrFence])
	if err == nil && !ok {
		err = errors.New("no fencing counter in the answer")
	}
	if err != nil {
		lk.cleanUp(l)
		return 0, fmt.Errorf("granted, but the fencing token is unreadable (released again): %w", err)
	}
	return token, nil
}

func (lk *Locker) update(name string, e *expr) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(lk.table),
		Key:                       map[string]types.AttributeValue{AttrName: &types.AttributeValueMemberS{Value: name}},
		UpdateExpression:          e.update(),
		ConditionExpression:       e.condition(),
		ExpressionAttributeNames:  e.names,
		ExpressionAttributeValues: e.values,
	}
}

// record is what a consistent read of a lock item shows.
type record struct {
	owner, rvn string
	lease      time.Duration // < 0: unreadable
	fence      int64
}

func (lk *Locker) read(ctx context.Context, name string) (record, error) {
	out, err := lk.c.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(lk.table),
		Key:            map[string]types.AttributeValue{AttrName: &types.AttributeValueMemberS{Value: name}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return record{}, err
	}
	var r record
	if v, ok := out.Item[AttrOwner].(*types.AttributeValueMemberS); ok {
		r.owner = v.Value
	}
	if v, ok := out.Item[AttrRV].(*types.AttributeValueMemberS); ok {
		r.rvn = v.Value
	}
	r.lease = -1
	if ms, ok, err := number(out.Item[AttrLease]); ok && err == nil && ms >= 0 && ms <= int64(1<<62)/int64(time.Millisecond) {
		r.lease = time.Duration(ms) * time.Millisecond
	}
	r.fence, _, _ = number(out.Item[AttrFence])
	return r, nil
}

// saw records that the lock called name is held at record version
// rec.rvn, and returns the sighting: the first one of that version, or a
// new one.
func (lk *Locker) saw(name string, rec record) sighting {
	now := time.Now()
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if s, ok := lk.watched[name]; ok && s.rvn == rec.rvn {
		return s
	}
	if len(lk.watched) >= maxWatched {
		lk.prune(now)
	}
	s := sighting{rvn: rec.rvn, lease: rec.lease, since: now}
	lk.watched[name] = s
	return s
}

// maxWatched bounds the sightings a Locker keeps before it drops stale
// ones.
const maxWatched = 4096

// prune drops sightings watched for more than twice their TTL (the lock
// has been seen renewed or released since, or nobody asks for it any
// more), and if that is not enough, all of them: forgetting a sighting
// only delays a takeover.
func (lk *Locker) prune(now time.Time) {
	for name, s := range lk.watched {
		if s.lease < 0 || now.Sub(s.since) > 2*s.lease {
			delete(lk.watched, name)
		}
	}
	if len(lk.watched) >= maxWatched {
		clear(lk.watched)
	}
}

// takeover returns the record version of the lock called name that this
// Locker has watched unchanged for its holder's TTL, or "".
func (lk *Locker) takeover(name string) string {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if s, ok := lk.watched[name]; ok && s.complete(time.Now()) {
		return s.rvn
	}
	return ""
}

func (lk *Locker) forget(name string) {
	lk.mu.Lock()
	delete(lk.watched, name)
	lk.mu.Unlock()
}

// cleanupTimeout bounds the release of an acquisition whose answer was
// lost: if DynamoDB granted it, it is given back rather than left to be
// taken over.
const cleanupTimeout = 500 * time.Millisecond

func (lk *Locker) cleanUp(l *held) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	l.Release(ctx)
}

// newID returns 128 random bits as hex: an owner or a record version.
func newID() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Table is the lock table's name.
func (lk *Locker) Table() string { return lk.table }
