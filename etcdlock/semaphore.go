package etcdlock

import (
	"context"
	"errors"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/ttllock"
)

// ErrSemaphoreSize: a semaphore acquisition asked for a size other than
// the one the name's holders hold it with ([Locker.Semaphore]). Nothing
// changed. It matches [sqlock.ErrSemaphoreSize].
var ErrSemaphoreSize = errkind.New(sqlock.ErrSemaphoreSize, "etcdlock: semaphore held with another size")

// semSpace begins the semaphores' keys after the Locker's prefix: a lock's
// keys are prefix + escaped name + "/", and an escaped name is never
// empty, so no lock's key begins prefix + "/".
const semSpace = "/semaphore/"

// Semaphore returns a [sqlock.SemaphoreAcquirer] of n slots per name on
// lk's cluster, each slot a key of its own attached to a lease of ttl (a
// *[Slot]): kept alive every ttl/3, lost and revoked as a [Lock]'s. Slot i
// of a semaphore of n is the key prefix + "/semaphore/" + name + "/" + n +
// "/" + i; one transaction writes it only if it is free and no key of the
// name has another size, so the size check and the grant are one step of
// the Raft log, and the key's create revision is the slot's fencing token.
// Another size while any slot is held is [ErrSemaphoreSize]. Waiters retry
// with jittered pauses (4–64 ms): a semaphore's waiters are not queued,
// unlike a lock's. n below 1, a bad name or ttl is [ErrInvalid], refused
// by every acquisition before anything is sent.
func (lk *Locker) Semaphore(n int, ttl time.Duration) sqlock.SemaphoreAcquirer {
	s := &semaphore{lk: lk, n: n, ttl: ttl}
	return ttllock.SemaphoreAcquirer(s.acquire, s.tryAcquire, n)
}

type semaphore struct {
	lk  *Locker
	n   int
	ttl time.Duration
}

func (s *semaphore) acquire(ctx context.Context, name string) (*Slot, error) {
	return s.take(ctx, "acquire", name, true)
}

func (s *semaphore) tryAcquire(ctx context.Context, name string) (*Slot, error) {
	return s.take(ctx, "tryacquire", name, false)
}

func (s *semaphore) take(ctx context.Context, op, name string, wait bool) (*Slot, error) {
	if s.lk == nil {
		return nil, kit.NilHandle(op, name, "Locker")
	}
	return ttllock.Acquire(ctx, &s.lk.base, (*semStore)(s), ttllock.Request{Op: op, Name: name, TTL: s.ttl, Wait: wait},
		func() (*Slot, *ttllock.Lock) {
			l := &Slot{}
			return l, &l.tl
		})
}

// semStore is a semaphore seen by the toolkit. Round trips per attempt: a
// read of the name's keys; if a slot is free, LeaseGrant and the
// transaction that writes it.
type semStore semaphore

func (s *semStore) Check(name string, ttl time.Duration) (time.Duration, error) {
	if err := ttllock.CheckSize(s.n); err != nil {
		return 0, err
	}
	return (*store)(s.lk).Check(name, ttl)
}

func (s *semStore) Grant(ctx context.Context, name string, ttl time.Duration, _ bool) (ttllock.Grant, error) {
	ctx = clientv3.WithRequireLeader(ctx)
	c := s.lk.c
	base := s.lk.prefix + semSpace + url.PathEscape(name) + "/"
	sized := base + strconv.Itoa(s.n) + "/"
	resp, err := c.Get(ctx, base, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return s.failed(ctx, err)
	}
	taken := make([]bool, s.n)
	for _, kv := range resp.Kvs {
		size, slot, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), base), "/")
		if size != strconv.Itoa(s.n) {
			held, _ := strconv.Atoi(size)
			return ttllock.Grant{}, ttllock.Refuse(ErrSemaphoreSize, ttllock.SizeMismatch(s.n, held))
		}
		if i, err := strconv.Atoi(slot); err == nil && i >= 0 && i < s.n {
			taken[i] = true
		}
	}
	free := -1
	for i, t := range taken {
		if !t {
			free = i
			break
		}
	}
	if free < 0 {
		return ttllock.Grant{Remaining: -1}, nil
	}
	sent := time.Now()
	g, err := c.Grant(ctx, int64(math.Ceil(ttl.Seconds())))
	if err != nil {
		return s.failed(ctx, err)
	}
	key := sized + strconv.Itoa(free)
	// The slot's key is free, and no key of the name is outside sized:
	// [base, sized) and [sized's end, base's end) are empty.
	tx, err := c.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(base), "=", 0).WithRange(sized),
		clientv3.Compare(clientv3.CreateRevision(clientv3.GetPrefixRangeEnd(sized)), "=", 0).WithRange(clientv3.GetPrefixRangeEnd(base)),
	).Then(clientv3.OpPut(key, "", clientv3.WithLease(g.ID))).Commit()
	if err != nil || !tx.Succeeded {
		(*store)(s.lk).revoke(g.ID) // the answer may be lost, not the write
		if err != nil {
			return s.failed(ctx, err)
		}
		return ttllock.Grant{Remaining: -1}, nil // taken meanwhile: try again
	}
	return ttllock.Grant{Held: &semHeld{held: held{c: c, key: key, lease: g.ID}, slot: free}, Token: tx.Header.Revision, Sent: sent}, nil
}

// failed is a request that failed: the context's end itself, which the
// toolkit reports, or a refusal (a cluster without a leader) that a wait
// tries again after a pause and a try reports.
func (s *semStore) failed(ctx context.Context, err error) (ttllock.Grant, error) {
	if ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return ttllock.Grant{}, err
	}
	return ttllock.Grant{Remaining: -1, Refused: ttllock.Refuse(nil, err)}, nil
}

// semHeld is a granted slot: its key's lease, kept alive and revoked as a
// lock's is, and its index.
type semHeld struct {
	held
	slot int
}

// Slot is a held slot of an etcd semaphore ([Locker.Semaphore]), with a
// fencing token. Its methods are safe for concurrent use.
type Slot struct {
	tl ttllock.Lock
}

// A Slot is a [sqlock.Slot]: a [sqlock.Fenced] lock with its index.
var _ sqlock.Slot = (*Slot)(nil)

// Name is the semaphore's name.
func (l *Slot) Name() string { return l.tl.Name() }

// Index is which of the semaphore's slots this is, 0 to N−1.
func (l *Slot) Index() int {
	if h, ok := l.tl.Held().(*semHeld); ok {
		return h.slot
	}
	return -1
}

// Key is the slot's key in etcd.
func (l *Slot) Key() string {
	if h, ok := l.tl.Held().(*semHeld); ok {
		return h.key
	}
	return ""
}

// Token is the slot's fencing token: its key's create revision, greater
// than that of every earlier holder of any slot of the name. Fence the
// data of this slot (Index) with it.
func (l *Slot) Token() int64 { return l.tl.Token() }

// Deadline is the local time until which the slot is trusted.
func (l *Slot) Deadline() time.Time { return l.tl.Deadline() }

// Lost is closed when the slot can no longer be trusted.
func (l *Slot) Lost() <-chan struct{} { return l.tl.Lost() }

// Err is nil while the slot is trusted, then an error matching [ErrLost].
func (l *Slot) Err() error { return l.tl.Err() }

// Context returns a context that ends when the slot is lost and carries
// its fencing token ([sqlock.WithFencingToken]).
func (l *Slot) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.tl.Context(parent)
}

// Release revokes the slot's lease, which deletes its key, as
// [Lock.Release] does a lock's.
func (l *Slot) Release(ctx context.Context) error {
	if l == nil {
		return kit.NilRelease()
	}
	return l.tl.Release(ctx)
}
