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

// Candidates on an etcd cluster whose client endpoints are in
// ETCD_ENDPOINTS: the winner's identity and term (its key's create
// revision) are what every candidate reads, and Observe reports each
// change.
func ExampleLocker_Candidate() {
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCD_ENDPOINTS"), ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	locks := etcdlock.New(cl)
	watcher := locks.Candidate("example-scheduler", "watcher", 10*time.Second)
	changes, err := watcher.Observe(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("first seen: %+v\n", <-changes) // nobody leads yet

	l, err := locks.Candidate("example-scheduler", "replica-1", 10*time.Second).Campaign(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for c := range changes {
		if c.Term == l.Token() {
			fmt.Println("observed:", c.Identity)
			break
		}
	}
	if err := l.Resign(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// first seen: {Identity: Term:0}
	// observed: replica-1
}
