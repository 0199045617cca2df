package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock/etcdlock"
)

// A job that must not run twice at once, on an etcd cluster whose client
// endpoints are in ETCD_ENDPOINTS. The work runs under the lock's Context,
// which ends if the lock is lost and carries its fencing token to fenced
// writes.
func Example() {
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCD_ENDPOINTS"), ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()

	locks := etcdlock.New(cl, etcdlock.WithTimeout(10*time.Second))
	l, err := locks.Acquire(context.Background(), "nightly-report", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	_ = ctx // run the job with ctx; stop when it ends

	if err := l.Release(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("released; token > 0:", l.Token() > 0)
	// Output: released; token > 0: true
}
