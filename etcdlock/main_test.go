package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock/etcdlock/internal/etcdtest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// childEnv makes the test binary a worker process (see child_test.go)
// instead of running tests.
const childEnv = "ETCDLOCK_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	// The examples connect to ETCD_ENDPOINTS, as a program would. A worker
	// process of the conformance suite brings its own.
	if os.Getenv("ETCD_ENDPOINTS") == "" && os.Getenv("LOCKTEST_WORKER") == "" {
		c, err := etcdtest.Start(context.Background(), 3)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		shared.cluster = c
		os.Setenv("ETCD_ENDPOINTS", strings.Join(c.Endpoints(), ","))
	}
	pgtest.Main(m, func() {
		if shared.cluster != nil {
			shared.cluster.Close()
		}
	})
}

// shared is the cluster of the tests that inflict no fault on it.
var shared struct {
	cluster *etcdtest.Cluster
}

// sharedClient is a client of the shared cluster of its own, closed when
// the test ends.
func sharedClient(t testing.TB) *clientv3.Client {
	t.Helper()
	cl, err := clientv3.New(etcdtest.Config(strings.Split(os.Getenv("ETCD_ENDPOINTS"), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
