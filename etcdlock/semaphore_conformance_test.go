package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/etcdlock"
	"github.com/sqlock/sqlock/etcdlock/internal/etcdtest"
	"github.com/sqlock/sqlock/internal/testing/locktest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// TestSemaphoreConformanceEtcd runs the semaphore suite on a three-member
// cluster of its own; the witness is a PostgreSQL database of its own.
// The backend's fault revokes the slot's lease behind its holder's back,
// as its expiry on the cluster would.
func TestSemaphoreConformanceEtcd(t *testing.T) {
	locktest.RunSemaphore(t, locktest.SemaphoreBackend{
		Name:     "etcdlock",
		MinTTL:   etcdlock.MinTTL,
		NotHeld:  etcdlock.ErrNotHeld,
		BadNames: []string{strings.Repeat("n", etcdlock.MaxNameLen+1)},
		BadTTLs:  []time.Duration{etcdlock.MaxTTL + time.Second},
		Start: func(t *testing.T) string {
			return strings.Join(etcdtest.New(t, 3).Endpoints(), ",")
		},
		Witness: func(t *testing.T, _ string) string { return pgtest.New(t).DSN },
		Open: func(t testing.TB, target string) locktest.SemaphoreHarness {
			client := func(endpoints ...string) *clientv3.Client {
				cl, err := clientv3.New(etcdtest.Config(endpoints...))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cl.Close() })
				return cl
			}
			cl := client(strings.Split(target, ",")...)
			sem := func(cl *clientv3.Client, n int, o locktest.Options) sqlock.SemaphoreAcquirer {
				return etcdlock.New(cl, etcdlock.WithTimeout(o.Timeout), etcdlock.WithObserver(o.Observer)).Semaphore(n, o.TTL)
			}
			return locktest.SemaphoreHarness{
				New: func(n int, o locktest.Options) sqlock.SemaphoreAcquirer { return sem(cl, n, o) },
				Unreachable: func(n int, o locktest.Options) sqlock.SemaphoreAcquirer {
					return sem(client("http://"+locktest.ClosedAddr(t)), n, o)
				},
				Lose: func(ctx context.Context, _ string, sl sqlock.Slot) error {
					s, ok := sl.(*etcdlock.Slot)
					if !ok {
						return errors.New("not an *etcdlock.Slot")
					}
					resp, err := cl.Get(ctx, s.Key())
					if err != nil {
						return err
					}
					if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != s.Token() {
						return errors.New("the slot's key is not the holder's")
					}
					_, err = cl.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
					return err
				},
			}
		},
	})
}
