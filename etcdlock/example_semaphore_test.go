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

// At most four builds at once on the cluster whose client endpoints are in
// ETCD_ENDPOINTS; a build runs under its slot's Context, which ends if the
// slot is lost.
func ExampleLocker_Semaphore() {
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCD_ENDPOINTS"), ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()

	builds := etcdlock.New(cl, etcdlock.WithTimeout(10*time.Second)).Semaphore(4, 10*time.Second)
	s, err := builds.Acquire(context.Background(), "example-builds")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := s.Context(context.Background())
	defer cancel()
	_ = ctx // run the build with ctx; stop when it ends

	if err := s.Release(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("released slot", s.Index())
	// Output: released slot 0
}
