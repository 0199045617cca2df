package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/redislock"
)

// At most two crawlers of a site at once: each slot is a lock of its own
// with its index and fencing token.
func ExampleLocker_Semaphore() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	crawlers := redislock.New(client, redislock.WithTimeout(2*time.Second)).Semaphore(2, 10*time.Second)

	a, err := crawlers.TryAcquire(ctx, "example:crawl:example.org")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Release(ctx)
	b, err := crawlers.TryAcquire(ctx, "example:crawl:example.org")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Release(ctx)
	fmt.Println("slots:", a.Index(), b.Index(), "tokens increase:", b.Token() > a.Token())

	_, err = crawlers.TryAcquire(ctx, "example:crawl:example.org")
	fmt.Println("a third:", errors.Is(err, sqlock.ErrNotAcquired))
	// Output:
	// slots: 0 1 tokens increase: true
	// a third: true
}
