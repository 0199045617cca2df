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
)

// TestConformance runs the lock backends' conformance suite on a
// three-member cluster of its own. The target is the members' client
// URLs, so that the suite's worker processes reach them. The backend's
// fault revokes the lock's lease behind its holder's back, as its expiry
// on the cluster would: the holder's next keepalive is refused. It runs
// with a lease per lock (the default) and with WithSharedLease.
func TestConformance(t *testing.T) {
	t.Run("lease-per-lock", func(t *testing.T) { conformance(t, "etcdlock", nil) })
	t.Run("shared-lease", func(t *testing.T) {
		conformance(t, "etcdlock-shared-lease", []etcdlock.Option{etcdlock.WithSharedLease()})
	})
}

// conformance runs the suite on the backend called name (the suite's
// worker processes run the sections of the backend of their name alone).
func conformance(t *testing.T, name string, opts []etcdlock.Option) {
	locktest.Run(t, locktest.Backend{
		Name:     name,
		Caps:     locktest.Caps{Fenced: true, TTL: true},
		MinTTL:   etcdlock.MinTTL,
		NotHeld:  etcdlock.ErrNotHeld,
		BadNames: []string{strings.Repeat("n", etcdlock.MaxNameLen+1)},
		BadTTLs:  []time.Duration{etcdlock.MaxTTL + time.Second},
		Start: func(t *testing.T) string {
			return strings.Join(etcdtest.New(t, 3).Endpoints(), ",")
		},
		Open: func(t testing.TB, target string) locktest.Harness {
			client := func(endpoints ...string) *clientv3.Client {
				cl, err := clientv3.New(etcdtest.Config(endpoints...))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cl.Close() })
				return cl
			}
			cl := client(strings.Split(target, ",")...)
			locker := func(cl *clientv3.Client, o locktest.Options) sqlock.Acquirer {
				return etcdlock.New(cl, append(opts, etcdlock.WithTimeout(o.Timeout), etcdlock.WithObserver(o.Observer))...).Acquirer(o.TTL)
			}
			return locktest.Harness{
				New: func(o locktest.Options) sqlock.Acquirer { return locker(cl, o) },
				Unreachable: func(o locktest.Options) sqlock.Acquirer {
					return locker(client("http://"+locktest.ClosedAddr(t)), o)
				},
				Lose: func(ctx context.Context, name string, lk sqlock.Lock) error {
					l, ok := lk.(*etcdlock.Lock)
					if !ok {
						return errors.New("not an *etcdlock.Lock")
					}
					resp, err := cl.Get(ctx, l.Key())
					if err != nil {
						return err
					}
					if len(resp.Kvs) != 1 {
						return errors.New("the lock's key is gone")
					}
					_, err = cl.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
					return err
				},
			}
		},
	})
}
