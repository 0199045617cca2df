package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/redislock"
)

// A lock on one Redis server: held and renewed until Release, with a
// fencing token for the writes it protects.
func ExampleLocker_Acquire() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	locks := redislock.New(client, redislock.WithTimeout(2*time.Second))

	l, err := locks.Acquire(ctx, "example:invoice:42", 10*time.Second)
	if err != nil {
		fmt.Println(err) // errors.Is(err, redislock.ErrTimeout) after 2 s of waiting
		return
	}
	defer l.Release(ctx)

	// Work under the lock's context: it ends if the lock is lost, and it
	// carries the fencing token, so versioned/sqlxhelpers/gormplugin fenced
	// writes made with it are refused once a newer holder has written.
	work, cancel := l.Context(ctx)
	defer cancel()
	tok, _ := sqlock.FencingToken(work)
	fmt.Println("token in the context:", tok == l.Token())

	_, err = locks.TryAcquire(ctx, "example:invoice:42", 10*time.Second)
	fmt.Println("second holder:", errors.Is(err, redislock.ErrNotAcquired))
	// Output:
	// token in the context: true
	// second holder: true
}

// Redlock over independent servers: the same calls on a majority of the
// servers — and no fencing token.
func ExampleNewRedlock() {
	ctx := context.Background()
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv("REDLOCK_ADDRS"), ",") { // 3 or 5 independent masters
		c := redis.NewClient(&redis.Options{Addr: addr,
			ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
		defer c.Close()
		clients = append(clients, c)
	}
	r := redislock.NewRedlock(clients)

	l, err := r.Acquire(ctx, "example:nightly-job", 10*time.Second)
	if err != nil {
		fmt.Println(err) // ErrTimeout; also ErrNoQuorum if most servers are down
		return
	}
	defer l.Release(ctx)
	work, cancel := l.Context(ctx) // ends when a majority can no longer be trusted
	defer cancel()
	_, fenced := sqlock.Lock(l).(sqlock.Fenced)
	fmt.Println("held:", work.Err() == nil, "fenced:", fenced)
	// Output:
	// held: true fenced: false
}

// Code written against sqlock.Acquirer runs on a Redis lock, a lease or an
// advisory lock alike.
func ExampleLocker_Acquirer() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	var locks sqlock.Acquirer = redislock.New(client).Acquirer(10 * time.Second)

	l, err := locks.Acquire(ctx, "example:report")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, fenced := l.(sqlock.Fenced)
	fmt.Println("fenced:", fenced)
	fmt.Println("released:", l.Release(ctx) == nil)
	// Output:
	// fenced: true
	// released: true
}

// A grant that must survive a failover: it is handed out only once a
// replica has it. This example's server has no replica, so the grant is
// refused — and released.
func ExampleWithReplicas() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	locks := redislock.New(client, redislock.WithReplicas(1, 20*time.Millisecond))

	_, err := locks.TryAcquire(ctx, "example:replicated", 10*time.Second)
	fmt.Println("not replicated:", errors.Is(err, redislock.ErrNotReplicated))
	fmt.Println("so not acquired:", errors.Is(err, sqlock.ErrNotAcquired))
	fmt.Println("key left behind:", client.Exists(ctx, "example:replicated").Val())
	// Output:
	// not replicated: true
	// so not acquired: true
	// key left behind: 0
}

// Several keys, all or none, each with its own fencing token.
func ExampleLocker_AcquireAll() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	locks := redislock.New(client)

	l, err := locks.AcquireAll(ctx, []string{"example:seat-12", "example:seat-11"}, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release(ctx)
	for _, k := range l.Keys() {
		tok, _ := l.Token(k)
		fmt.Println(k, tok > 0)
	}
	_, err = locks.TryAcquireAll(ctx, []string{"example:seat-10", "example:seat-11"}, 10*time.Second)
	fmt.Println("overlapping set:", errors.Is(err, redislock.ErrNotAcquired))
	fmt.Println("seat-10 taken meanwhile:", client.Exists(ctx, "example:seat-10").Val())
	// Output:
	// example:seat-11 true
	// example:seat-12 true
	// overlapping set: true
	// seat-10 taken meanwhile: 0
}

// Who holds a lock: the label and payload its holder's Locker stored.
func ExampleLocker_Holder() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	worker := redislock.New(client, redislock.WithHolder("host-a pid 4242"), redislock.WithPayload([]byte(`{"job":"nightly"}`)))

	l, err := worker.Acquire(ctx, "example:nightly", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release(ctx)

	h, held, err := redislock.New(client).Holder(ctx, "example:nightly")
	fmt.Println(held, err, h.Label, string(h.Payload), h.Token == l.Token())
	// Output:
	// true <nil> host-a pid 4242 {"job":"nightly"} true
}
