package redislock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/redislock/internal/redistest"
)

// cmdLog records the arguments of every command a client sends, so that a
// test can tell which of them carried a lock's owner.
type cmdLog struct {
	mu   sync.Mutex
	cmds []string
}

func (l *cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		l.cmds = append(l.cmds, fmt.Sprint(cmd.Args()...))
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (l *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// renewals counts the commands sent so far whose arguments hold owner s
// and that are neither the acquire nor the release script: the renewals.
// Acquisition and release are left out because Redlock returns from both
// once a majority answered, so their commands to the last server may pass
// this hook after the call returned.
func (l *cmdLog) renewals(s string) int {
	acquire, release := redislock.Scripts()
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.cmds {
		if strings.Contains(c, s) && !strings.Contains(c, acquire) && !strings.Contains(c, release) {
			n++
		}
	}
	return n
}

// panicOnAcquired is an observer that reads the owner of the lock it is
// told of (from a server that granted it: Redlock's acquisition returns
// once a majority did) and then panics with itself.
type panicOnAcquired struct {
	admins []redis.UniversalClient
	key    string
	owner  string
}

func (p *panicOnAcquired) Observe(ctx context.Context, e observe.Event) {
	if e.Kind == observe.LockAcquire && e.Outcome == observe.Acquired {
		p.owner, _ = ownerOn(ctx, p.admins, p.key, "")
		panic(p)
	}
}

// ownerOn is key's value on the first of the servers that has it with a
// value other than except, and that server's index. except is how a test
// finds the new holder on Redlock: the previous holder's release returns
// once a majority confirmed, so the last server may still hold its value.
func ownerOn(ctx context.Context, admins []redis.UniversalClient, key, except string) (owner string, server int) {
	for i, c := range admins {
		if v := c.Get(ctx, key).Val(); v != "" && v != except {
			return v, i
		}
	}
	return "", -1
}

// acquireRecovering runs acquire and returns what it panicked with.
func acquireRecovering(acquire func() error) (recovered any, err error) {
	defer func() { recovered = recover() }()
	return nil, acquire()
}

// TestObserverPanicOnAcquiredReleasesTheLock: an observer that panics on
// the acquired event — on one server and on Redlock — gets its panic
// back, with the lock already released: the key is gone from every server
// as the panic propagates, another holder gets it at once, and no command
// carrying the panicked acquisition's owner (a renewal) is sent after the
// panic, while the new holder is renewed three times.
func TestObserverPanicOnAcquiredReleasesTheLock(t *testing.T) {
	leakCheck(t)
	// Three renewals to wait for (one TTL). The witness is renewed every
	// TTL/3 with two thirds of a TTL to spare: 4 s of stall beside CPU hogs
	// still leave it held; a 1 s TTL gave 0.6 s.
	const ttl = 6 * time.Second
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "single", 3: "redlock-3"}[n], func(t *testing.T) {
			servers := redistest.NewN(t, n, redistest.Options{})
			logs := make([]*cmdLog, n)
			cs := clients(t, servers)
			for i, c := range cs {
				logs[i] = new(cmdLog)
				c.AddHook(logs[i])
			}
			obs := &panicOnAcquired{key: "k"}
			for _, s := range servers {
				admin := s.Client(t, nil)
				if err := redislock.LoadScripts(context.Background(), admin); err != nil {
					t.Fatal(err)
				}
				obs.admins = append(obs.admins, admin)
			}
			panicking, plain := acquirers(cs, ttl, redislock.WithObserver(obs)), acquirers(cs, ttl)
			ctx := context.Background()
			got, err := acquireRecovering(func() error { _, err := panicking.Acquire(ctx, "k"); return err })
			if got != obs || err != nil {
				t.Fatalf("recovered %v, error %v; want the observer's own panic", got, err)
			}
			if len(obs.owner) != 32 {
				t.Fatalf("the observer saw owner %q", obs.owner)
			}
			sentBefore := 0
			for _, l := range logs {
				sentBefore += l.renewals(obs.owner)
			}
			if n == 1 { // Redlock's release returns once a majority confirmed
				if k := must[int64](t)(cs[0].Exists(ctx, "k").Result()); k != 0 {
					t.Fatal("the key outlived the panic")
				}
			}
			l, err := plain.TryAcquire(ctx, "k")
			if err != nil {
				t.Fatalf("after the panic the lock was not free: %v", err)
			}
			defer l.Release(ctx)
			next, on := ownerOn(ctx, obs.admins, "k", obs.owner)
			if on < 0 {
				t.Fatal("the new holder's key is on no server")
			}
			// Three renewals of the new holder, on a server that granted it
			// (Redlock renews only where it holds the key).
			for logs[on].renewals(next) < 3 {
				if l.Err() != nil {
					t.Fatalf("the new holder lost its lock: %v", l.Err())
				}
				time.Sleep(time.Millisecond)
			}
			sentAfter := 0
			for _, l := range logs {
				sentAfter += l.renewals(obs.owner)
			}
			if sentAfter != sentBefore {
				t.Fatalf("%d renewals of the panicked lock after the panic", sentAfter-sentBefore)
			}
		})
	}
}

// acquirers is a Locker's Acquirer on one client, a Redlock's on several.
func acquirers(cs []redis.UniversalClient, ttl time.Duration, opts ...redislock.Option) sqlock.Acquirer {
	if len(cs) == 1 {
		return redislock.New(cs[0], opts...).Acquirer(ttl)
	}
	return redislock.NewRedlock(cs, opts...).Acquirer(ttl)
}
